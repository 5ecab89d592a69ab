"""The back-propagation checks: `gradient_flow` (every parameter learns, or is frozen on purpose) and `finite`
(nothing infinite at initialization)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from harness.checks.model.passes import shared_train_pass, step_settings, train_pass
from harness.checks.result import FAIL, PASS, WARN, CheckResult, brief_list
from harness.data.batch import to_device
from harness.train.nonfinite import first_nonfinite_module


def one_step(
    model: nn.Module, batch: dict, seed: int, lr: float, grads: dict | None = None, loss=None
) -> nn.Module:
    """A copy of `model` after one optimizer step on `batch`: Adam's first, which moves every weight by about
    lr against its gradient's sign."""
    # a zero-initialized part (a residual branch's output, LayerScale, adaLN-zero, the head) blocks gradients
    # or hides the input at step 0 by design, and no longer does after that step
    grads = grads if grads is not None else shared_train_pass(model, batch, seed, loss).grads
    stepped = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in stepped.named_parameters():
            if grads.get(name) is not None:
                p -= lr * grads[name].sign()
    return stepped


def _needed_to_learn(model: nn.Module, head: str | None) -> dict[str, str]:
    """{parameter name: what it is} for the token embedding and the output head (`head`), which the loss
    cannot do without learning."""
    names = {id(p): n for n, p in model.named_parameters()}
    parts = (("the token embedding", getattr(model, "token_embedding", None)), ("the output head", head))
    roles: dict[str, list[str]] = {}
    for part, module in parts:
        if module is not None:
            for p in (model.get_submodule(module) if isinstance(module, str) else module).parameters():
                roles.setdefault(names[id(p)], []).append(part)
    return {name: " and ".join(parts) for name, parts in roles.items()}


def gradient_flow(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Every trainable parameter gets a finite gradient that is non-zero, or becomes so after one step;
    the token embedding and the output head are not frozen; other frozen parameters are a warning."""
    seed, lr, loss = step_settings(cfg)
    found = shared_train_pass(model, batch, seed, loss)
    if found.changed:
        return CheckResult(
            "gradient_flow",
            WARN,
            f"not judged: forward changes {brief_list(found.changed)} in place (see determinism)",
        )
    grads, head = found.grads, found.head
    unconnected = [n for n, g in grads.items() if g is None]
    nonfinite = [n for n, g in grads.items() if g is not None and not torch.isfinite(g).all()]
    zero = [n for n, g in grads.items() if g is not None and n not in nonfinite and not g.any()]
    blocked = []
    if zero:  # an exactly zero gradient that one step wakes is a zero-initialized branch, by design
        after = train_pass(one_step(model, batch, seed, lr, grads, loss), batch, seed, loss).grads
        blocked = [n for n in zero if after[n] is None or not after[n].any()]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    needed = _needed_to_learn(model, head)
    frozen_needed = [n for n in frozen if n in needed]
    faults = []
    if frozen_needed:
        faults.append(
            "frozen (requires_grad=False) though the loss needs it to learn: "
            + ", ".join(f"{n} ({needed[n]})" for n in frozen_needed)
            + ": a random one that never learns; unfreeze it"
        )
    if unconnected:
        faults.append(
            f"not connected (no gradient at all: unused, or cut off by a detach): {brief_list(unconnected)}"
        )
    if blocked:
        faults.append(
            "blocked (gradient exactly zero, still after one optimizer step: a dead path or a zeroing op): "
            f"{brief_list(blocked)}"
        )
    if nonfinite:
        faults.append(f"non-finite gradient: {brief_list(nonfinite)}")
    if faults:
        return CheckResult("gradient_flow", FAIL, "; ".join(faults))
    woke = [n for n in zero if n not in blocked]
    detail = f"all {len(grads)} trainable parameter tensors get a finite, non-zero gradient" + (
        f" ({len(woke)} of them only after one step: zero-initialized branches, by design: {brief_list(woke, 3)})"
        if woke
        else ""
    )
    others = [n for n in frozen if n not in needed]
    if others:
        return CheckResult(
            "gradient_flow",
            WARN,
            f"{len(others)} frozen parameter tensors (requires_grad=False) never learn: {brief_list(others)}; "
            f"fine if frozen on purpose. {detail[0].upper()}{detail[1:]}",
        )
    return CheckResult("gradient_flow", PASS, detail)


def finite(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Logits, loss and gradients are finite at initialization; names the first module at fault."""
    seed, _, loss = step_settings(cfg)
    found = shared_train_pass(model, batch, seed, loss)
    if not torch.isfinite(found.logits).all():
        first_bad = first_nonfinite_module(model, to_device(batch, model)["input_ids"]) or "?"
        return CheckResult("finite", FAIL, f"module {first_bad!r} is the first to output a non-finite value")
    if not torch.isfinite(found.loss):
        return CheckResult(
            "finite",
            FAIL,
            f"the loss is {found.loss.item()} though the logits are finite: check the targets and mask",
        )
    bad_grads = [n for n, g in found.grads.items() if g is not None and not torch.isfinite(g).all()]
    if bad_grads:
        return CheckResult("finite", FAIL, f"non-finite gradients in {brief_list(bad_grads)}")
    return CheckResult("finite", PASS, "logits, loss and gradients are finite at initialization")
