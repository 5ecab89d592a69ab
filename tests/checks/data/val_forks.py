"""Validation loaders a fork might write, for the `val_order` row: the correct PaddedLM and StreamingLM of
tests/forks/data/ with their val_dataloader() changed, shuffled or drawn at random (the planted mistakes), or kept
in one order by a sampler of their own (correct). A config names one: `data._target_=tests.checks.data.val_forks.ShuffledVal`."""

from __future__ import annotations

import random

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
)

from tests.forks.data.correct import PaddedLM, StreamingLM


class ShuffledVal(PaddedLM):
    """BUG: the validation loader copied from the training one, shuffle=True and all."""

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val_dataset, shuffle=True)


class SampledVal(PaddedLM):
    """BUG: an explicit RandomSampler (seeded, as if that made it fixed: its generator advances every pass)."""

    def val_dataloader(self) -> DataLoader:
        sampler = RandomSampler(self.val_dataset, generator=torch.Generator().manual_seed(0))
        return DataLoader(self.val_dataset, self.batch_size, sampler=sampler, collate_fn=self.collate)


class BatchSampledVal(PaddedLM):
    """BUG: a batch sampler over a RandomSampler (the DataLoader's own sampler, a SequentialSampler, is never read)."""

    def val_dataloader(self) -> DataLoader:
        batches = BatchSampler(RandomSampler(self.val_dataset), self.batch_size, drop_last=False)
        return DataLoader(self.val_dataset, batch_sampler=batches, collate_fn=self.collate)


class DistributedVal(PaddedLM):
    """BUG: a DistributedSampler made by hand for validation, its shuffle=True left at the default."""

    def val_dataloader(self) -> DataLoader:
        sampler = DistributedSampler(self.val_dataset, num_replicas=1, rank=0)
        return DataLoader(self.val_dataset, self.batch_size, sampler=sampler, collate_fn=self.collate)


class ResumableVal(PaddedLM):
    """BUG: the harness's own resumable training loader reused for validation (it orders each epoch anew)."""

    def val_dataloader(self) -> DataLoader:
        from harness.data.sampler import ResumableLoader

        return ResumableLoader(
            self.val_dataset, self.batch_size, seed=0, drop_last=False, collate_fn=self.collate
        )


class Drawn(Dataset):
    """Item i is an example drawn at random from the global generator (`draw`: torch's or Python's)."""

    def __init__(self, dataset, draw: str = "torch"):
        self.dataset, self.draw = dataset, draw

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        n = len(self.dataset)
        return self.dataset[int(torch.randint(n, ())) if self.draw == "torch" else random.randrange(n)]

    def record(self, i):
        return self.dataset.record(i)


class DrawnVal(PaddedLM):
    """BUG: the validation dataset's __getitem__ draws its example with torch.randint."""

    draw = "torch"

    def val_dataloader(self) -> DataLoader:
        return self.loader(Drawn(self.val_dataset, self.draw), shuffle=False)


class PythonDrawnVal(DrawnVal):
    """BUG: the validation dataset's __getitem__ draws its example with random.randrange."""

    draw = "python"


class Permutation(Sampler):
    """A permutation of range(size): drawn afresh from the global torch generator every pass (`fixed=False`), or
    the same one every pass, from the seed alone (`fixed=True`); `by_epoch`: seeded with seed + epoch."""

    def __init__(self, size: int, fixed: bool = True, by_epoch: bool = False, seed: int = 0):
        self.size, self.fixed, self.by_epoch, self.seed, self.epoch = size, fixed, by_epoch, seed, 0

    def __len__(self) -> int:
        return self.size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if not self.fixed:
            return iter(torch.randperm(self.size).tolist())
        generator = torch.Generator().manual_seed(self.seed + (self.epoch if self.by_epoch else 0))
        return iter(torch.randperm(self.size, generator=generator).tolist())


class PermutedVal(PaddedLM):
    """A sampler of its own; `fixed`, `by_epoch`: Permutation's. Correct only as fixed and not by epoch."""

    fixed, by_epoch = True, False

    def val_dataloader(self) -> DataLoader:
        sampler = Permutation(len(self.val_dataset), self.fixed, self.by_epoch)
        return DataLoader(self.val_dataset, self.batch_size, sampler=sampler, collate_fn=self.collate)


class RedrawnVal(PermutedVal):
    """BUG: a sampler of its own that draws a new permutation every pass, from the global generator."""

    fixed = False


class EpochSeededVal(PermutedVal):
    """BUG: a sampler of its own re-shuffled by the epoch Lightning announces (set_epoch) before each validation."""

    by_epoch = True


class Reshuffled(IterableDataset):
    """A stream's first `size` items, in an order drawn from Python's global generator at every pass."""

    def __init__(self, dataset, size: int = 32):
        self.dataset, self.size = dataset, size

    def __iter__(self):
        items = [item for _, item in zip(range(self.size), self.dataset, strict=False)]
        random.shuffle(items)
        yield from items


class ShuffledValStream(StreamingLM):
    """BUG: the validation stream read through a shuffle, as the training one is."""

    def __init__(self, length: int, **kwargs):
        super().__init__(length, **{"num_workers": 0, **kwargs})

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Reshuffled(self.val_dataset), self.batch_size)
