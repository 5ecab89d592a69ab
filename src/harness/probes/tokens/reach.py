"""Gradient by position: `input_grad_by_position` (how strongly the loss reaches each input position; a tanh
RNN's falls with distance, a transformer's stays flat) and its summary `reach`."""

from __future__ import annotations

import torch
from torch import nn

from harness.ops.loss import CrossEntropy, Loss


def input_grad_by_position(model: nn.Module, batch: dict, loss_fn: Loss | None = None) -> torch.Tensor:
    """Float[time]: ‖∂L/∂e_t‖, e the token embeddings, L the run's loss; parameter gradients untouched."""
    captured: list[torch.Tensor] = []
    handle = model.token_embedding.register_forward_hook(
        lambda module, inputs, output: captured.append(output)
    )
    try:
        with torch.enable_grad():
            logits = model(batch["input_ids"])
            loss = (loss_fn or CrossEntropy())(logits, batch["targets"], batch["loss_mask"])
            (grad,) = torch.autograd.grad(loss, captured[0])
    finally:
        handle.remove()
    return grad.float().pow(2).sum(dim=(0, 2)).sqrt()


def reach(norms: list[float]) -> float:
    """‖∂L/∂e_0‖ / ‖∂L/∂e_{T-2}‖: the share of the signal that reaches the first position (nan: undefined)."""
    if len(norms) < 2 or norms[-2] == 0:
        return float("nan")
    return norms[0] / norms[-2]
