"""Shuffling that a checkpoint can resume mid-epoch, bit for bit.

Epoch e's order is a permutation drawn from (seed, e) alone, so it needs no saved generator; the
loader's state is just (epoch, batches already trained on), which Lightning stores in the checkpoint
(it saves any train loader with state_dict/load_state_dict) and hands back on resume."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def shard() -> tuple[int, int]:
    """(rank, ranks) of this process in its torch.distributed group; (0, 1) when it runs alone."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochPermutation(DistributedSampler):
    """A fresh permutation each epoch, drawn from (seed, epoch); can start part-way through. Under DDP each
    rank takes every ranks-th index of the same permutation (the remainder dropped, so every rank runs the
    same number of steps): the ranks' shares are disjoint and together one epoch, as a DistributedSampler's.

    A DistributedSampler by type so that Lightning leaves it in place under DDP (it would wrap any other
    sampler, rebuilding the loader); it asks torch.distributed for its share when iterated, not when built,
    which is before the ranks exist."""

    def __init__(self, size: int, seed: int):  # no super().__init__: it would ask for the ranks now
        self.size, self.seed = size, seed
        self.epoch, self.skip = 0, 0

    @property
    def rank(self) -> int:
        return shard()[0]

    @property
    def num_replicas(self) -> int:
        return shard()[1]

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this before each epoch (as for a DistributedSampler)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size // shard()[1]

    def __iter__(self):
        order = torch.randperm(
            self.size, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        )
        rank, ranks = shard()
        mine = order[: len(self) * ranks][rank::ranks]
        skip, self.skip = self.skip, 0
        yield from mine[skip:].tolist()


class ResumableLoader(DataLoader):
    """A shuffled DataLoader whose position survives a checkpoint. Lightning fetches one batch ahead
    and may not exhaust an epoch's iterator, so the position saved is the fit loop's own count of
    batches trained on (kept current by harness.train.checkpoints.ResumeState), and the epoch is Lightning's."""

    def __init__(self, dataset, batch_size: int, seed: int, drop_last: bool, **kwargs):
        self.order = EpochPermutation(len(dataset), seed)
        # its own generator: creating an iterator would otherwise draw from the global one (dropout's)
        super().__init__(
            dataset,
            batch_size=batch_size,
            sampler=self.order,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(seed),
            **kwargs,
        )
        self.trained = (0, 0)  # (epoch, batches trained on in it)

    def state_dict(self) -> dict:
        epoch, done = self.trained
        return {"epoch": epoch + 1, "start": 0} if done >= len(self) else {"epoch": epoch, "start": done}

    def load_state_dict(self, state: dict) -> None:
        self.order.set_epoch(state["epoch"])
        self.order.skip = state["start"] * self.batch_size
