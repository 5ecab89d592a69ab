"""Gradient by position: how strongly the loss reaches back to the input at each position.

The direct picture of vanishing gradients: for a tanh RNN the norm falls geometrically with distance
from the positions the loss is taken at; for a transformer it stays flat."""

from __future__ import annotations

import torch
from torch import nn

from harness.ops.loss import CrossEntropy, Loss


def input_grad_by_position(model: nn.Module, batch: dict, loss_fn: Loss | None = None) -> torch.Tensor:
    """‖∂L/∂e_t‖ for each position t, where e = model.token_embedding(input_ids) and L the run's loss (`loss_fn`;
    None: cross entropy).

    Norm over the batch and embedding axes: returns Float[time] (on the model's device). Parameter
    gradients are left untouched (torch.autograd.grad, not backward), so it is safe mid-training."""
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
    """Gradient reach = ‖∂L/∂e_0‖ / ‖∂L/∂e_{T-2}‖: how much of the signal at the second-to-last position
    (the last one has a direct path to the loss) survives the trip back to the first. 0.0 when it
    underflowed to exactly zero; nan when the sequence is too short or the reference is 0."""
    if len(norms) < 2 or norms[-2] == 0:
        return float("nan")
    return norms[0] / norms[-2]
