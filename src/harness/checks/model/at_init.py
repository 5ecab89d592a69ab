"""The checks at initialization: `init_loss` (near a uniform guess), `determinism` and `global_rng`
(repeatable under a seed, the global generators left alone); and `twins` (every twin agrees with itself)."""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.checks.model.passes import (
    computed_once,
    masked_loss,
    shared_train_pass,
    step_settings,
    train_pass,
)
from harness.checks.result import FAIL, PASS, WARN, CheckResult, brief_list
from harness.data.batch import to_device, training_mode
from harness.ops.loss import loss_of
from harness.seeding import rng_state, seed_all


def init_loss(
    model: nn.Module, batch: dict, cfg=None, warn_at: float = 0.1, fail_at: float = 0.25
) -> CheckResult:
    """The loss at initialization is near ln(classes), a uniform guess's, averaged over every class as the
    target at the masked positions (the batch's own targets' loss reported beside it)."""
    logits = _shared_eval_pass(model, batch)[0].float()
    batch = to_device(batch, model)
    measured = masked_loss(logits, batch, loss_of(cfg)).item()
    # what the output scale alone says, without the noise of which targets a few positions hold (4 positions
    # of logits with std 0.6 scatter their loss by ~10%)
    at = logits[batch["loss_mask"]]  # [masked position, class]
    any_target = (at.logsumexp(dim=-1) - at.mean(dim=-1)).mean().item()
    expected = math.log(logits.shape[-1])
    gap = abs(any_target - expected) / expected
    detail = (
        f"expected ~ln({logits.shape[-1]}) = {expected:.3f}, measured {any_target:.3f} over every target "
        f"({gap:.0%} off; {measured:.3f} on this batch's targets)"
    )
    if not (math.isfinite(measured) and math.isfinite(any_target)) or gap > fail_at:
        return CheckResult(
            "init_loss",
            FAIL,
            detail + ": the output scale at init is off (initialize the "
            "last layer smaller), or the loss is not over the logits' classes",
        )
    return CheckResult("init_loss", WARN if gap > warn_at else PASS, detail)


def determinism(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Two forward/backward passes after re-seeding give identical loss and gradients, and leave the
    parameters as they were."""
    seed, _, loss = step_settings(cfg)
    first = shared_train_pass(model, batch, seed, loss)
    second = train_pass(model, batch, seed, loss) if not first.changed else first
    changed = first.changed or second.changed
    if changed:
        return CheckResult(
            "determinism",
            FAIL,
            f"forward changes {brief_list(changed)} in place (checksum before and after one forward pass "
            "differ): every pass runs a different model; keep running values in a buffer and leave "
            "weight updates to the optimizer",
        )
    if not torch.equal(first.loss, second.loss):
        return CheckResult(
            "determinism",
            FAIL,
            f"loss {first.loss.item():.8g} then {second.loss.item():.8g} under the same seed, with the "
            "weights unchanged: some randomness escapes seeding (a private torch.Generator, or a "
            "nondeterministic op)",
        )
    differing = [
        n
        for n, g in first.grads.items()
        if (g is None) != (second.grads[n] is None) or (g is not None and not torch.equal(g, second.grads[n]))
    ]
    if differing:
        return CheckResult(
            "determinism",
            FAIL,
            f"gradients of {differing[0]} differ under the same seed "
            "(a nondeterministic kernel? try torch.use_deterministic_algorithms(True))",
        )
    return CheckResult("determinism", PASS, "same seed, same loss and gradients, bit for bit")


def _rng_states_equal(x, y) -> bool:
    """Equal, tensors and nested lists of them included (the parts of an rng_state())."""
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and bool(torch.equal(x, y))
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(map(_rng_states_equal, x, y))
    return x == y


def _eval_pass(model: nn.Module, batch: dict, seed: int) -> tuple[torch.Tensor, dict, dict]:
    """Seed, then one eval-mode forward: the logits, and the global generators' states before and after."""
    ids = to_device(batch, model)["input_ids"]
    seed_all(seed)
    start = rng_state()
    with training_mode(model, training=False), torch.no_grad():
        logits = model(ids)
    return logits, start, rng_state()


def _shared_eval_pass(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict, dict]:
    return computed_once(batch, ("eval", 1), model, lambda: _eval_pass(model, batch, 1))


def _drawing_module(model: nn.Module, batch: dict) -> str:
    """Where an eval-mode forward touches the global generators: the innermost module whose call changes
    their state, or forward's own code."""
    touched: list[str] = []
    before: dict[str, dict] = {}

    def pre(name):
        def hook(module, args):
            before[name] = rng_state()

        return hook

    def post(name):
        def hook(module, args, output):
            end = rng_state()
            if not touched and any(not _rng_states_equal(before[name][k], end[k]) for k in end):
                touched.append(name)

        return hook

    modules = [(name, m) for name, m in model.named_modules() if name]
    handles = [m.register_forward_pre_hook(pre(name)) for name, m in modules]
    handles += [m.register_forward_hook(post(name)) for name, m in modules]
    try:
        _eval_pass(model, batch, 1)
    finally:
        for handle in handles:
            handle.remove()
    return f"in {touched[0]!r}" if touched else "in forward's own code, outside every module"


def global_rng(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """An eval-mode forward draws nothing from the global random generators, and does not re-seed them."""
    _, start, end = _shared_eval_pass(model, batch)
    _, other_start, other_end = _eval_pass(model, batch, 2)
    reseeded = [  # two different starting states (not CUDA's on a CPU: none), one end state
        name
        for name in end
        if not _rng_states_equal(start[name], other_start[name])
        and _rng_states_equal(end[name], other_end[name])
    ]
    drawn = [name for name in end if not _rng_states_equal(start[name], end[name])]
    if reseeded:
        return CheckResult(
            "global_rng",
            FAIL,
            f"forward re-seeds the global RNG ({', '.join(reseeded)}), {_drawing_module(model, batch)}: started "
            "from two different seeds, it ends in the same state, so every call draws the same 'random' "
            "numbers whatever the run's seed (remove the seeding call from forward)",
        )
    if drawn:
        return CheckResult(
            "global_rng",
            FAIL,
            f"an eval-mode forward draws from the global RNG ({', '.join(drawn)}), "
            f"{_drawing_module(model, batch)}: evaluation is random and shifts every random number drawn after "
            "it (a torch.rand*/randn*/randperm or numpy/random call outside dropout, or dropout with "
            "training=True)",
        )
    return CheckResult("global_rng", PASS, "an eval-mode forward leaves the global RNG untouched")


def twins(model=None, batch=None, cfg=None, shapes: int | None = 2, tolerance: float = 1e-4) -> CheckResult:
    """Every registered twin's loop and vectorized versions agree (on its first `shapes` test shapes)."""
    import harness.ops  # noqa: F401  (loads the built-in twins)
    from harness.ops import max_difference, registered

    found = registered()
    worst = (0.0, "")
    for cls in found:
        for shape in cls.test_shapes[:shapes]:
            inputs = cls.example_inputs(torch.Generator().manual_seed(0), **shape)
            twin = cls(vectorize=True)
            with torch.no_grad():
                gap = max_difference(twin.loop(*inputs), twin.vectorized(*inputs))
            if not gap <= tolerance:  # also a NaN gap
                return CheckResult(
                    "twins",
                    FAIL,
                    f"{cls.__name__} at {shape}: loop and vectorized differ by up to "
                    f"{gap:.3e} (> {tolerance}); the loop version is the spec",
                )
            worst = max(worst, (gap, cls.__name__))
    if not found:
        return CheckResult("twins", WARN, "no twins registered (the harness's own are missing)")
    names = ", ".join(cls.__name__ for cls in found)
    return CheckResult(
        "twins",
        PASS,
        f"{len(found)} twins agree (largest gap {worst[0]:.1e}, {worst[1]}): the harness's own and those the "
        f"fork registers ({names}); this row says nothing about the model itself",
    )
