"""Batches (docs/contracts.md, Batch) as the checks, the overfit verdict and the probes handle them: the first
examples of a dataset collated into one, a batch moved to a model's device, and a model run in train or
eval mode for a while."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.data import default_collate


def first_examples(dataset, size: int) -> dict:
    """The first `size` examples of `dataset` (fewer if it has fewer), collated into a Batch."""
    return default_collate([dataset[i] for i in range(min(size, len(dataset)))])


def to_device(batch: dict, where: nn.Module | torch.device | str) -> dict:
    """`batch` with every tensor on `where`: a device, or the device of a module's parameters."""
    device = next(where.parameters()).device if isinstance(where, nn.Module) else where
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@contextmanager
def training_mode(model: nn.Module, training: bool):
    """Run `model` in train (True) or eval (False) mode, then put back whichever mode it was in."""
    was = model.training
    model.train(training)
    try:
        yield model
    finally:
        model.train(was)
