"""Shuffling that a checkpoint resumes mid-epoch, bit for bit: epoch e's order is drawn from (seed, e) alone,
and the loader's state is (epoch, batches trained on), which Lightning keeps in the checkpoint."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def _rank_and_world() -> tuple[int, int]:
    """(rank, ranks) of this process in its torch.distributed group; (0, 1) when it runs alone."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# a DistributedSampler by type, so that Lightning leaves it in place under DDP (it would wrap any other
# sampler); it asks torch.distributed for its share when iterated, not when built (before the ranks exist)
class EpochPermutation(DistributedSampler):
    """A permutation each epoch from (seed, epoch), able to start part-way; under DDP each rank takes every
    ranks-th index (the remainder dropped): disjoint shares, one epoch together."""

    def __init__(self, size: int, seed: int):  # no super().__init__: it would ask for the ranks now
        self.size, self.seed = size, seed
        self.epoch, self.skip = 0, 0

    @property
    def rank(self) -> int:
        return _rank_and_world()[0]

    @property
    def num_replicas(self) -> int:
        return _rank_and_world()[1]

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this before each epoch (as for a DistributedSampler)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size // _rank_and_world()[1]

    def __iter__(self):
        order = torch.randperm(
            self.size, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        )
        rank, ranks = _rank_and_world()
        mine = order[: len(self) * ranks][rank::ranks]
        skip, self.skip = self.skip, 0
        yield from mine[skip:].tolist()


class ResumableLoader(DataLoader):
    """A shuffled DataLoader whose position survives a checkpoint: batches trained on (kept by
    harness.train.checkpoints.ResumeState) in Lightning's epoch."""

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
        # (epoch, batches trained in it): Lightning reads one batch ahead, and may not end an epoch's iterator
        self.trained = (0, 0)

    def state_dict(self) -> dict:
        epoch, done = self.trained
        return {"epoch": epoch + 1, "start": 0} if done >= len(self) else {"epoch": epoch, "start": done}

    def load_state_dict(self, state: dict) -> None:
        self.order.set_epoch(state["epoch"])
        self.order.skip = state["start"] * self.batch_size
