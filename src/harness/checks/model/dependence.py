"""The dependence checks: change some input tokens, see which logits move (causality, batch_independence,
word_order, input_dependence), every forward in train mode, re-seeded. A FAIL names which positions or
examples leak into which, and the first module that breaks it (first_break)."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.model.first_break import examples_region, first_break, positions_up_to
from harness.checks.model.gradients import one_step
from harness.checks.model.passes import Runner, WeightsChanged, shared_train_pass, step_settings
from harness.checks.result import FAIL, PASS, WARN, CheckResult, brief_list
from harness.data.batch import to_device

#: a model ignores word order when swapping two tokens moves its logits by less than this fraction of what
#: changing one of them does: float rounding of a sum taken in another order is ~1e-5 of it; a correct model
#: at init, RoPE or learned positions, measures 1e-2 to 1
ORDER_BLIND = 1e-3
#: a logit "moves" when it changes by more than this fraction of the logits' largest magnitude: far above
#: float rounding (a correct model's logits do not change at all), far below any real dependence
TOLERANCE = 1e-5


def _with_tokens_replaced(ids: torch.Tensor, where: torch.Tensor, vocab: int, seed: int = 1) -> torch.Tensor:
    """`ids` with every token where `where` (Bool, broadcast to ids) is True replaced by a different one."""
    generator = torch.Generator().manual_seed(seed)
    offset = torch.randint(1, max(vocab, 2), ids.shape, generator=generator).to(ids.device)
    return torch.where(where.expand_as(ids), (ids + offset) % vocab, ids)


def logits_moved(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """Bool over the leading axes of `a` and `b` ([..., vocab]): the logits there moved by more than TOLERANCE
    of `scale`."""
    return (a - b).abs().amax(dim=-1) > TOLERANCE * max(scale, 1e-30)


def judge_now_or_after_step(name: str, judge, model: nn.Module, batch: dict, cfg) -> CheckResult:
    """`judge(model, ids, run, base logits)`'s CheckResult; where it finds nothing moved (None), once more on
    a copy after one optimizer step; None again: VACUOUS[name]."""
    seed, lr, loss = step_settings(cfg)
    found = shared_train_pass(
        model, batch, seed, loss
    )  # its logits are those of a Runner: seeded, train mode
    ids = to_device(batch, model)["input_ids"]
    try:
        if found.changed:
            raise WeightsChanged(found.changed)
        result = judge(model, ids, Runner(model, seed), found.logits.float())
        if result is not None:
            return result
        # a zero-initialized output hides the input at step 0 by design: judged again after one step
        stepped = one_step(model, batch, seed, lr, found.grads, loss)
        run = Runner(stepped, seed)
        result = judge(stepped, ids, run, run(ids))
    except WeightsChanged as err:
        return CheckResult(
            name, WARN, f"not judged: {err} (two forward passes are two different models; see determinism)"
        )
    if result is None:
        return CheckResult(name, *VACUOUS[name])
    result.detail += " (judged after one optimizer step, on a copy: at init the logits ignore the input)"
    return result


def _at_positions(ids: torch.Tensor, positions) -> torch.Tensor:
    where = torch.zeros(ids.shape[1], dtype=torch.bool, device=ids.device)
    where[list(positions)] = True
    return where


def causality(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Changing the tokens after position t moves no logit at positions <= t, for several t."""
    time = batch["input_ids"].shape[1]
    boundaries = sorted({0, time // 2, time - 2} & set(range(time - 1)))
    if not boundaries:
        return CheckResult("causality", PASS, "a single position: no later input to leak")

    def judge(model, ids, run, base):
        scale, vocab = base.abs().amax().item(), base.shape[-1]
        any_moved = False
        for t in boundaries:
            other = _with_tokens_replaced(ids, _at_positions(ids, range(t + 1, time)), vocab)
            out = run(other)
            leaked = logits_moved(out[:, : t + 1], base[:, : t + 1], scale).any(dim=0)
            any_moved = any_moved or bool(logits_moved(out[:, t + 1 :], base[:, t + 1 :], scale).any())
            if leaked.any():
                pattern = _leak_pattern(run, ids, base, scale, vocab, t)
                where = first_break(model, run, ids, other, positions_up_to(t))
                return CheckResult(
                    "causality",
                    FAIL,
                    f"changing the inputs after position {t} moves the output at positions "
                    f"{brief_list(leaked.nonzero().flatten().tolist())}: {pattern}; {where}",
                )
        if not any_moved:
            return None
        after = ", ".join(map(str, boundaries))
        return CheckResult(
            "causality", PASS, f"no output moves when later inputs change (after positions {after})"
        )

    return judge_now_or_after_step("causality", judge, model, batch, cfg)


def _leak_pattern(run: Runner, ids, base, scale: float, vocab: int, t: int) -> str:
    """Which single later inputs move which earlier outputs, and what that pattern usually means."""
    time = ids.shape[1]
    seen = {}
    for source in sorted({t + 1, (t + time) // 2, time - 1}):
        out = run(_with_tokens_replaced(ids, _at_positions(ids, [source]), vocab, seed=source))
        hit = logits_moved(out[:, :source], base[:, :source], scale).any(dim=0).nonzero().flatten().tolist()
        if hit:
            seen[source] = hit
    if not seen:
        return "the leak shows only when several later inputs change together"
    told = "; ".join(f"input {s} moves outputs {brief_list(hit, 4)}" for s, hit in seen.items())
    if all(hit == [s - 1] for s, hit in seen.items()):
        cause = "each position sees the next input: a mask off by one, or ids shifted by one"
    elif all(hit == list(range(s)) for s, hit in seen.items()):
        cause = (
            "every earlier position sees a later input: no causal mask, a softmax over queries instead of "
            "keys, time mixed with heads (a head split or merge without its transpose), or statistics "
            "over time"
        )
    else:
        cause = "a scattered pattern: time mixed with another axis (a head or batch reshape without its transpose)"
    return f"{told} ({cause})"


def batch_independence(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Changing the tokens of some examples moves no logit of the others."""
    b = batch["input_ids"].shape[0]
    if b < 2:
        return CheckResult("batch_independence", WARN, "needs a batch of at least 2 examples")

    def judge(model, ids, run, base):
        rows = torch.arange(b, device=ids.device)
        scale, vocab = base.abs().amax().item(), base.shape[-1]
        any_moved = False
        # every pair of examples differs in some bit of their index: change the examples with that bit set, then
        # those with it clear, and watch the others
        for bit in range(max(1, (b - 1).bit_length())):
            for value in (1, 0):
                changed = (rows >> bit) % 2 == value
                other = _with_tokens_replaced(ids, changed[:, None], vocab)
                out = run(other)
                moves = logits_moved(out, base, scale).any(dim=1)
                any_moved = any_moved or bool(moves.any())
                leaked = moves & ~changed
                if leaked.any():
                    kept = (~changed).nonzero().flatten().tolist()
                    where = first_break(model, run, ids, other, examples_region(kept))
                    return CheckResult(
                        "batch_independence",
                        FAIL,
                        f"changing the tokens of examples {brief_list(changed.nonzero().flatten().tolist())} moves "
                        f"the logits of examples {brief_list(leaked.nonzero().flatten().tolist())}: something "
                        "mixes the batch axis (a reshape across batch and time, batch statistics, a "
                        f"batch-wide softmax); {where}",
                    )
        if not any_moved:
            return None
        return CheckResult("batch_independence", PASS, f"the {b} examples never move each other's logits")

    return judge_now_or_after_step("batch_independence", judge, model, batch, cfg)


def word_order(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Swapping two earlier tokens moves the logits at the last position."""
    ids = batch["input_ids"]
    time = ids.shape[1]
    t = time - 1
    if time < 3:
        return CheckResult("word_order", PASS, "fewer than 3 positions: no two earlier tokens to swap")
    swapped, other, pairs = ids.clone(), ids.clone(), []
    for row in range(ids.shape[0]):  # the input just before t, and the nearest earlier one that differs
        j = t - 1
        i = next((i for i in range(j - 1, -1, -1) if ids[row, i] != ids[row, j]), None)
        if i is not None:
            swapped[row, i], swapped[row, j] = ids[row, j], ids[row, i]
            other[row, i] = ids[row, j]  # the same change at i alone: how much position i matters at all
            pairs.append((row, i, j))
    if not pairs:
        return CheckResult("word_order", WARN, "every example repeats one token: nothing to swap")
    rows = [row for row, _, _ in pairs]

    def judge(model, ids, run, base):
        swap, change = ((run(x.to(ids.device)) - base)[rows, t].abs().amax().item() for x in (swapped, other))
        if change <= TOLERANCE * max(base.abs().amax().item(), 1e-30):
            return None  # the earlier tokens do not reach the last logits at all (yet)
        if swap <= ORDER_BLIND * change:
            return CheckResult(
                "word_order",
                FAIL,
                f"swapping two earlier tokens moves the logits at position {t} by {swap:.1e}, changing one "
                f"of them by {change:.1e}: the model ignores word order; its position information is lost "
                "(a position embedding or rotary embedding that is never applied?)",
            )
        return CheckResult(
            "word_order",
            PASS,
            f"swapping two earlier tokens moves the last logits by {swap:.3g} ({swap / change:.2g} of what "
            "changing one of them does)",
        )

    return judge_now_or_after_step("word_order", judge, model, batch, cfg)


def input_dependence(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """The logits change when the inputs change."""

    def judge(model, ids, run, base):
        other = run(_with_tokens_replaced(ids, torch.ones_like(ids, dtype=torch.bool), base.shape[-1]))
        change = (base - other).abs().amax().item()
        if change <= TOLERANCE * max(base.abs().amax().item(), 1e-30):
            return None
        return CheckResult(
            "input_dependence", PASS, f"changing the inputs moves the logits by up to {change:.3g}"
        )

    return judge_now_or_after_step("input_dependence", judge, model, batch, cfg)


#: (status, detail) of each check for a model whose logits do not move whatever the input, also after one step
VACUOUS = {
    "causality": (WARN, "changing later inputs moved no output at all: see input_dependence"),
    "batch_independence": (WARN, "changing examples moved no logit at all: see input_dependence"),
    "document_isolation": (WARN, "changing a document moved no output at all: see input_dependence"),
    "word_order": (
        FAIL,
        "swapping the last two different earlier tokens leaves the last logits unchanged, also after one "
        "optimizer step: the model ignores word order; its position information is lost (a position "
        "embedding or rotary embedding that is never applied?)",
    ),
    "input_dependence": (
        FAIL,
        "changing every input token moves no logit, also after one optimizer step: the model ignores its "
        "input (a detached or zeroed embedding path?)",
    ),
}
