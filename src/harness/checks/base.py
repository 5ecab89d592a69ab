"""What every check shares: its result type, a sample batch, and the hooks that reach a model from outside."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.utils.data import default_collate

from harness.twins import MaskedCrossEntropy

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass
class CheckResult:
    name: str
    status: str  # PASS | WARN | FAIL
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def masked_loss(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    return MaskedCrossEntropy(vectorize=True)(logits, batch["targets"], batch["loss_mask"])


def sample_batch(dataset, size: int = 4) -> dict:
    """The first `size` examples of `dataset`, collated into a Batch."""
    return default_collate([dataset[i] for i in range(min(size, len(dataset)))])


def to_device(batch: dict, model: nn.Module) -> dict:
    device = next(model.parameters()).device
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@contextmanager
def embedding_outputs(model: nn.Module):
    """Collects the output of `model.token_embedding` ([b, time, d]) with its gradient retained,
    so a check can ask how the loss depends on each example and position."""
    captured: list[torch.Tensor] = []

    def hook(module, inputs, output):
        output.retain_grad()
        captured.append(output)

    handle = model.token_embedding.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


@contextmanager
def mode(model: nn.Module, training: bool):
    """Run in train or eval mode, then restore whatever mode the model was in."""
    was = model.training
    model.train(training)
    try:
        yield model
    finally:
        model.train(was)


def shown(values, limit: int = 6) -> str:
    values = list(values)
    head = ", ".join(str(v) for v in values[:limit])
    return head + (f", ... ({len(values)} in all)" if len(values) > limit else "")
