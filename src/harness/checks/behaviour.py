"""Checks of what a model does at initialization: loss near a uniform guess, repeatable under a seed,
sensitive to its input; and every twin agreeing with itself."""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.checks.base import FAIL, PASS, WARN, CheckResult, masked_loss, mode, to_device
from harness.seeding import seed_all


def init_loss(
    model: nn.Module, batch: dict, cfg=None, warn_at: float = 0.1, fail_at: float = 0.25
) -> CheckResult:
    """The loss at initialization is near ln(classes), the loss of a uniform guess over the logits."""
    batch = to_device(batch, model)
    with mode(model, training=False), torch.no_grad():
        logits = model(batch["input_ids"])
        measured = masked_loss(logits, batch).item()
    expected = math.log(logits.shape[-1])
    gap = abs(measured - expected) / expected
    detail = f"expected ~ln({logits.shape[-1]}) = {expected:.3f}, measured {measured:.3f} ({gap:.0%} off)"
    if not math.isfinite(measured) or gap > fail_at:
        return CheckResult(
            "init_loss",
            FAIL,
            detail + ": the output scale at init is off (initialize the "
            "last layer smaller), or the loss is not over the logits' classes",
        )
    return CheckResult("init_loss", WARN if gap > warn_at else PASS, detail)


def determinism(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Two forward/backward passes after re-seeding give identical loss and gradients."""
    batch = to_device(batch, model)
    seed = int((cfg or {}).get("seed", 0))
    runs = []
    with mode(model, training=True):
        for _ in range(2):
            seed_all(seed)
            model.zero_grad(set_to_none=True)
            loss = masked_loss(model(batch["input_ids"]), batch)
            loss.backward()
            runs.append(
                (
                    loss.detach().clone(),
                    {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
                )
            )
    model.zero_grad(set_to_none=True)
    (loss_a, grads_a), (loss_b, grads_b) = runs
    if not torch.equal(loss_a, loss_b):
        return CheckResult(
            "determinism",
            FAIL,
            f"loss {loss_a.item():.8g} then {loss_b.item():.8g} under the same seed: "
            "some randomness escapes seeding (a private torch.Generator, or a nondeterministic op)",
        )
    differing = [n for n in grads_a if n not in grads_b or not torch.equal(grads_a[n], grads_b[n])]
    if differing:
        return CheckResult(
            "determinism",
            FAIL,
            f"gradients of {differing[0]} differ under the same seed "
            "(a nondeterministic kernel? try torch.use_deterministic_algorithms(True))",
        )
    return CheckResult("determinism", PASS, "same seed, same loss and gradients, bit for bit")


def input_dependence(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """The logits change when the inputs change."""
    batch = to_device(batch, model)
    ids = batch["input_ids"]
    with mode(model, training=False), torch.no_grad():
        logits = model(ids)
        vocab = logits.shape[-1]
        other = model((ids + 1) % vocab)  # every token replaced by the next one of the vocabulary
    change = (logits - other).abs().amax().item()
    scale = logits.abs().amax().item() or 1.0
    if change <= 1e-6 * scale:
        return CheckResult(
            "input_dependence",
            FAIL,
            f"changing every input token moved the logits by {change:.2e}: "
            "the model ignores its input (a detached or zeroed embedding path?)",
        )
    return CheckResult(
        "input_dependence", PASS, f"changing the inputs moves the logits by up to {change:.3g}"
    )


def twins(model=None, batch=None, cfg=None, shapes: int | None = 2, tolerance: float = 1e-4) -> CheckResult:
    """Every registered twin's loop and vectorized versions agree (on its first `shapes` test shapes)."""
    import harness.twins  # noqa: F401  (loads the built-in twins)
    from harness.twins import max_difference, registered

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
        return CheckResult("twins", WARN, "no twins registered")
    return CheckResult("twins", PASS, f"{len(found)} twins agree (largest gap {worst[0]:.1e}, {worst[1]})")
