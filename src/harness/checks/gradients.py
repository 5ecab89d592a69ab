"""Checks of back-propagation: every parameter learns, examples never mix, the future never leaks,
and nothing is infinite at initialization. Each needs only the Model contract (docs/contracts.md)."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.base import (
    FAIL,
    PASS,
    WARN,
    CheckResult,
    embedding_outputs,
    masked_loss,
    mode,
    shown,
    to_device,
)
from harness.faults import first_nonfinite_module

NOT_CALLED = (
    "forward never called model.token_embedding: the output ignores the input, or the tokens are "
    "embedded by another module (the Model contract: embed input_ids with `token_embedding`)"
)


def gradient_flow(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """One forward/backward: every parameter gets a finite, non-zero gradient."""
    batch = to_device(batch, model)
    model.zero_grad(set_to_none=True)
    with mode(model, training=True):
        masked_loss(model(batch["input_ids"]), batch).backward()
    unconnected, blocked, nonfinite = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            unconnected.append(name)
        elif not torch.isfinite(p.grad).all():
            nonfinite.append(name)
        elif not p.grad.any():
            blocked.append(name)
    model.zero_grad(set_to_none=True)
    faults = []
    if unconnected:
        faults.append(
            f"not connected (no gradient at all: unused, or cut off by a detach): {shown(unconnected)}"
        )
    if blocked:
        faults.append(f"blocked (gradient exactly zero: a dead path or a zeroing op): {shown(blocked)}")
    if nonfinite:
        faults.append(f"non-finite gradient: {shown(nonfinite)}")
    if faults:
        return CheckResult("gradient_flow", FAIL, "; ".join(faults))
    count = sum(1 for p in model.parameters() if p.requires_grad)
    return CheckResult(
        "gradient_flow", PASS, f"all {count} parameter tensors get a finite, non-zero gradient"
    )


def batch_independence(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """The loss of example i alone has zero gradient on every other example's token-embedding output."""
    batch = to_device(batch, model)
    b = batch["input_ids"].shape[0]
    if b < 2:
        return CheckResult("batch_independence", WARN, "needs a batch of at least 2 examples")
    for i in sorted({0, b - 1}):
        with mode(model, training=True), embedding_outputs(model) as captured:
            logits = model(batch["input_ids"])
            one = {k: v[i : i + 1] for k, v in batch.items()}
            masked_loss(logits[i : i + 1], one).backward()
        if not captured:
            return CheckResult("batch_independence", FAIL, NOT_CALLED)
        grad = captured[0].grad
        model.zero_grad(set_to_none=True)
        if grad is None:
            return CheckResult("batch_independence", WARN, "token_embedding's output got no gradient")
        per_example = grad.flatten(1).abs().amax(dim=1)
        leaks = [j for j in range(b) if j != i and per_example[j] > 0]
        if leaks:
            return CheckResult(
                "batch_independence",
                FAIL,
                f"the loss of example {i} has a gradient on examples "
                f"{shown(leaks)} (largest {per_example[leaks].max().item():.2e}): something mixes the "
                "batch axis (a reshape across batch and time, batch statistics, a batch-wide softmax)",
            )
    return CheckResult(
        "batch_independence", PASS, f"examples never mix: checked the losses of examples {sorted({0, b - 1})}"
    )


def causality(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """The output at time t has zero gradient on the inputs after t, for several t."""
    batch = to_device(batch, model)
    time = batch["input_ids"].shape[1]
    probe = torch.Generator().manual_seed(0)
    for t in sorted({0, 1, time // 2, time - 2, time - 1} & set(range(time))):
        with mode(model, training=False), embedding_outputs(model) as captured:
            logits = model(batch["input_ids"])
            direction = torch.randn(logits.shape[-1], generator=probe).to(logits)
            (logits[:, t] @ direction).sum().backward()
        if not captured:
            return CheckResult("causality", FAIL, NOT_CALLED)
        grad = captured[0].grad
        model.zero_grad(set_to_none=True)
        if grad is None:
            return CheckResult("causality", WARN, "token_embedding's output got no gradient")
        per_position = grad.abs().amax(dim=(0, 2))
        future = [s for s in range(t + 1, time) if per_position[s] > 0]
        if future:
            return CheckResult(
                "causality",
                FAIL,
                f"the output at position {t} depends on later inputs at positions "
                f"{shown(future)}: the causal mask is missing or off by one",
            )
        if not per_position[: t + 1].any():
            return CheckResult("causality", FAIL, f"the output at position {t} depends on no input at all")
    return CheckResult(
        "causality",
        PASS,
        f"no output depends on a later input (positions 0, 1, {time // 2}, {time - 2}, {time - 1})",
    )


def finite(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Logits, loss and gradients are finite at initialization; names the first module at fault."""
    batch = to_device(batch, model)
    with mode(model, training=True):
        logits = model(batch["input_ids"])
        loss = masked_loss(logits, batch)
        loss.backward()
        first_bad = (
            [] if torch.isfinite(logits).all() else [first_nonfinite_module(model, batch["input_ids"]) or "?"]
        )
    bad_grads = [
        n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
    ]
    model.zero_grad(set_to_none=True)
    if first_bad:
        return CheckResult(
            "finite", FAIL, f"module {first_bad[0]!r} is the first to output a non-finite value"
        )
    if not torch.isfinite(loss):
        return CheckResult(
            "finite",
            FAIL,
            f"the loss is {loss.item()} though the logits are finite: check the targets and mask",
        )
    if bad_grads:
        return CheckResult("finite", FAIL, f"non-finite gradients in {shown(bad_grads)}")
    return CheckResult("finite", PASS, "logits, loss and gradients are finite at initialization")
