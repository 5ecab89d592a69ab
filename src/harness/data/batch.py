"""Batches as the checks, the overfit verdict and the probes handle them: a split's first examples collated as
its loader does, a batch moved to a model's device, a model run in a given mode."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from itertools import islice

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, default_collate


def indexable(dataset) -> bool:
    """Whether `dataset` is read by index (a map-style dataset with a length), not only by iterating it."""
    if isinstance(dataset, IterableDataset):
        return False
    try:
        len(dataset)
    except TypeError:
        return False
    return hasattr(dataset, "__getitem__")


def first_items(dataset, size: int) -> list:
    """The first `size` items of `dataset` (fewer if it has fewer): by index, or as a stream yields them in
    this process, unsharded."""
    if indexable(dataset):
        return [dataset[i] for i in range(min(size, len(dataset)))]
    return list(islice(iter(dataset), size))


def collate_of(loader: DataLoader | None) -> Callable:
    """The function `loader` turns a list of items into a batch with (a fork's padding collate, say);
    default_collate where it batches nothing itself."""
    if loader is None or getattr(loader, "batch_sampler", None) is None:
        return default_collate
    return loader.collate_fn or default_collate


def first_rows(data, split: str, size: int):
    """The first `size` examples of the `split` ("train" or "val") dataset, collated as its loader collates
    them; None where the split is empty."""
    items = first_items(getattr(data, f"{split}_dataset"), size)
    return collate_of(getattr(data, f"{split}_dataloader")())(items) if items else None


def first_examples(dataset, size: int) -> dict:
    """The first `size` examples of `dataset` (fewer if it has fewer), collated by default_collate."""
    return default_collate(first_items(dataset, size))


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
