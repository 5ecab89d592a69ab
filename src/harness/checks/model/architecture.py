"""The architecture checks, read from one watched eval-mode forward at init (watched_forward.py): `residual`,
`attention_scale` and `stable_log_probs`. Each needs only the Model contract; a model without such a part
passes, saying it was not judged."""

from __future__ import annotations

import math

from torch import nn

from harness.checks.model.passes import step_settings
from harness.checks.model.score_scale import Reading, declared_scale
from harness.checks.model.watched_forward import NOISE, shared_inside_pass
from harness.checks.result import FAIL, PASS, WARN, CheckResult, brief_list

#: a block passes its input on when its output keeps at least this share of it (x + f(x) keeps all of it: ~1,
#: whatever f adds; f(x) alone keeps what chance gives, ~0) or points this close to it (a post-norm block,
#: norm(x + f(x)), rescales its input and keeps its direction)
KEPT = 0.5
#: attention's scores are too large when the factor applied to q·kᵀ is at least this many times 1/sqrt(head_dim)
#: (unscaled: sqrt(head_dim), 2.8 at a head width of 8; multiplied where it should be divided: head_dim), too
#: small at most this share of it (divided twice: 1/sqrt(head_dim)); a declared scale holds within DECLARED
TOO_LARGE, TOO_SMALL, DECLARED = 2.0, 0.5, 0.1
#: attention is nearly one-hot when the top key's weight, measured from uniform (0) to one-hot (1), is this
#: high on average: a correct model at init spreads its weight (0.0 to 0.1; ALiBi's steepest slopes ~0.5 at 1/key)
ONE_HOT = 0.6


def residual(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Every block of the model's stack (numbered, chained children) passes its input on at initialization:
    its output keeps its input, as x + f(x) does."""
    stacks = shared_inside_pass(model, batch, cfg).stacks
    blocks = [block for found in stacks.values() for block in found]
    if not blocks:
        return CheckResult(
            "residual",
            PASS,
            "not judged: no stack of blocks (numbered children, each one's output the next one's input, that "
            "normalize or attend)",
        )
    lost = [(name, kept, cos) for name, kept, cos in blocks if kept < KEPT and cos < KEPT]
    names = ", ".join(f"{stack}.*" if stack else "*" for stack in stacks)
    if lost:
        figures = ", ".join(f"{name} {kept:.2f}" for name, kept, _ in lost[:4])
        return CheckResult(
            "residual",
            FAIL,
            f"{brief_list(n for n, _, _ in lost)} do not pass their input on: the share of its input a block's output "
            f"keeps is {figures} (cosine {max(cos for *_, cos in lost):.2f} at most), where a residual block "
            "keeps all of it (x + f(x): ~1): the residual connection is missing (x = f(x) where x = x + f(x) "
            "was meant)",
        )
    kept = [kept for _, kept, _ in blocks]
    return CheckResult(
        "residual",
        PASS,
        f"{len(blocks)} blocks ({names}) pass their input on (the share of it each output keeps: "
        f"{min(kept):.2f} to {max(kept):.2f})",
    )


def attention_scale(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Attention scales q·kᵀ by 1/sqrt(head_dim) before its softmax (or by a module's declared
    `attention_scale`; a temperature where q and k are normalized), and at init spreads each query's weight
    over its keys."""
    inside = shared_inside_pass(model, batch, cfg)
    found = inside.attention
    if not found:
        return CheckResult(
            "attention_scale",
            PASS,
            "not judged: no attention seen (a softmax over [..., time, time] scores, or "
            "scaled_dot_product_attention)",
        )
    means = {name: (a.excess / a.rows, a.spread / a.rows) for name, a in found.items()}
    saturated = {name: m for name, m in means.items() if m[0] >= ONE_HOT}
    if saturated:
        name, (excess, spread) = max(saturated.items(), key=lambda item: item[1][0])
        return CheckResult(
            "attention_scale",
            FAIL,
            f"attention is nearly one-hot at initialization in {brief_list(saturated)}: its top key takes "
            f"{excess:.0%} of the way from a uniform weight to all of it ({name}; its scores' std over the keys "
            f"{spread:.3g}), where a correct init spreads the weight: "
            "the scores are scaled far too large (multiplied by sqrt(head_dim) instead of divided, or not "
            "scaled), and the softmax passes almost no gradient to the queries and keys",
        )
    wrong, small, read = _scale_verdicts(model, inside.scales)
    if wrong:
        return CheckResult("attention_scale", FAIL, wrong)
    worst = max(m[0] for m in means.values())
    spread = max(m[1] for m in means.values())
    return CheckResult(
        "attention_scale",
        WARN if small else PASS,
        small
        or f"{read}; attention spreads its weight at init in {brief_list(means)} (the top key at most {worst:.0%} of "
        f"the way from uniform to one-hot; the scores' std over the keys up to {spread:.3g})",
    )


def _scale_verdicts(model: nn.Module, scales: dict[str, list[Reading]]) -> tuple[str, str, str]:
    """(a FAIL's detail, a WARN's detail, what was read) of the attention modules' scales: each one's median
    factor on q·kᵀ against 1/sqrt(head_dim) or what it declares."""
    large, small, temperatures, kept = [], [], [], []
    for name, readings in scales.items():
        reading = sorted(readings, key=lambda r: r.ratio)[len(readings) // 2]
        declared = declared_scale(model, name)
        if declared is not None:
            if abs(reading.factor / declared - 1) > DECLARED:
                return (
                    f"{name} declares attention_scale={declared:.3g} and applies {reading.factor:.3g}",
                    "",
                    "",
                )
            kept.append(name)
        elif all(r.normalized for r in readings):
            temperatures.append(f"{name} {reading.factor:.3g}")
        elif reading.ratio >= TOO_LARGE:
            large.append((name, reading))
        elif reading.ratio <= TOO_SMALL:
            small.append((name, reading))
        else:
            kept.append(name)
    if large:
        name, reading = max(large, key=lambda item: item[1].ratio)
        return _too_large(name, reading, [n for n, _ in large]), "", ""
    parts = [f"by 1/sqrt(head_dim), or as declared, in {brief_list(kept)}"] if kept else []
    parts += [f"by a temperature on normalized q and k in {brief_list(temperatures)}"] if temperatures else []
    read = (
        f"attention scales q·kᵀ as it should ({'; '.join(parts)})"
        if parts
        else "the factor applied to q·kᵀ was not read (no torch product of q and k, or one batch example)"
    )
    if small:
        name, reading = min(small, key=lambda item: item[1].ratio)
        return (
            "",
            (
                f"{brief_list(n for n, _ in small)} scale q·kᵀ by {reading.factor:.3g} ({name}), {reading.ratio:.3g} times "
                f"1/sqrt(head_dim) = 1/sqrt({reading.width}): scores that small learn slowly (scaled twice?); a "
                f"temperature meant so: declare `attention_scale = {reading.factor:.3g}` on the module"
            ),
            read,
        )
    return "", "", read


def _too_large(name: str, reading: Reading, names: list[str]) -> str:
    """The detail of scores scaled too large, naming the likely mistake by the ratio found."""
    width, ratio = reading.width, reading.ratio
    if abs(ratio / width - 1) < DECLARED:
        cause = "multiplied by sqrt(head_dim) where it should be divided"
    elif abs(ratio / math.sqrt(width) - 1) < DECLARED:
        cause = "not scaled at all"
    else:
        cause = "scaled by more than 1/sqrt(head_dim)"
    return (
        f"{brief_list(names)} scale q·kᵀ by {reading.factor:.3g} before the softmax ({name}), {ratio:.3g} times "
        f"1/sqrt(head_dim) = 1/sqrt({width}) = {1 / math.sqrt(width):.3g}: the scores are {cause}, "
        f"{ratio:.3g} times too large; the softmax saturates as the weights grow and passes little gradient to "
        f"the queries and keys (a temperature meant so: declare `attention_scale = {reading.factor:.3g}` on the "
        "module)"
    )


def stable_log_probs(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """With random logits of std NOISE added to the output head's (every prediction certain), the model's
    logits and the loss stay finite: log(softmax(x)) gives -inf there."""
    found = shared_inside_pass(model, batch, cfg)
    if found.head is None:
        return CheckResult(
            "stable_log_probs",
            PASS,
            "not judged: no module outputs the logits (forward's own code makes them)",
        )
    pushed = (
        f"with random logits of std {NOISE:g} added to the output of {found.head!r} (each prediction certain)"
    )
    if found.logits_nonfinite:
        return CheckResult(
            "stable_log_probs",
            FAIL,
            f"{pushed}, {found.logits_nonfinite:.0%} of the logits forward returns are -inf or NaN: it computes "
            "log-probabilities that underflow or overflow once a prediction is confident (log(softmax(x)), or "
            "log(exp(x).sum()) without subtracting the max); return the logits, or their log-softmax (torch's, which subtracts the max)",
        )
    loss = type(step_settings(cfg)[2]).__name__
    if found.loss != found.loss or abs(found.loss) == float("inf"):
        return CheckResult(
            "stable_log_probs",
            FAIL,
            f"{pushed}, the logits stay finite but the loss ({loss}) is {found.loss}: it computes "
            "log-probabilities unstably (log(softmax(x))); use torch's log-softmax or its cross-entropy, which subtract the max",
        )
    return CheckResult(
        "stable_log_probs", PASS, f"{pushed}, the logits and the loss stay finite ({found.loss:.4g})"
    )
