"""What a fork might bring to a run on several processes, used by tests: datamodules whose first step holds the same
eight examples however it is split, callbacks that keep what a test reads back, and planted mistakes of scaled
training (each says it in its docstring, after "BUG:"). Given by config, as a fork gives its own:

    data=fork data._target_=tests.forks.scale.EightDocuments        (hydra.searchpath=[file://tests/conf])
    +callbacks.initial._target_=tests.forks.scale.KeepInitialWeights
"""

from __future__ import annotations

import random
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Sampler

from harness.ops.loss import Loss
from tests.forks.data import Examples, FixedClassification, PaddedClassification, PaddedLM, StreamingLM

# ---------------------------------------------------------------- one step, split three ways


class EightDocuments(PaddedLM):
    """PaddedLM with its 8 training documents of most unequal lengths, read in order: a step over all 8 holds the
    same examples whether it is one batch of 8, two accumulated micro-batches of 4 or two ranks of 4."""

    def build(self) -> None:
        super().build()
        train = self.train_dataset
        order = sorted(range(len(train)), key=lambda i: len(train[i]))
        picked = sorted([*order[:4], *order[-4:]])  # the 4 shortest and the 4 longest, in their own order
        self.train_dataset = Examples([train.record(i) for i in picked], [train[i] for i in picked])

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_dataset, shuffle=False)


class EightLabels(PaddedClassification):
    """PaddedClassification with 8 training texts, read in order (one position in the loss each)."""

    def __init__(self, length: int, batch_size: int = 8, num_workers: int = 0, seed: int = 0):
        super().__init__(
            length, size=8, val_size=8, batch_size=batch_size, num_workers=num_workers, seed=seed
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_dataset, shuffle=False)


class KeepInitialWeights(pl.Callback):
    """Writes the model's weights as training starts to `<run dir>/initial.pt` (rank 0): a test reads the step."""

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            state = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}
            torch.save(state, Path(trainer.default_root_dir) / "initial.pt")


# ---------------------------------------------------------------- every rank reads the same examples


class RankUnshardedWindows(IterableDataset):
    """A stream of windows sharded by DataLoader worker, as a one-GPU script shards it, and not by rank."""

    def __init__(self, windows):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        shard = range(len(self)) if worker is None else range(worker.id, len(self), worker.num_workers)
        for i in shard:
            yield self.windows.item(i)

    def record(self, i: int) -> dict:
        return self.windows.record(i)


class RankShardedWindows(RankUnshardedWindows):
    """The same stream, each rank taking every world-th window of its own (then each worker its share of those)."""

    def __iter__(self):
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        worker = torch.utils.data.get_worker_info()
        workers, me = (1, 0) if worker is None else (worker.num_workers, worker.id)
        for i in range(rank * workers + me, len(self), world * workers):
            yield self.windows.item(i)


class SameStreamOnEveryRank(StreamingLM):
    """BUG: the stream is sharded over the workers but not over the ranks: under DDP every rank reads every window."""

    sharding = RankUnshardedWindows

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sharding(self.train_dataset), self.batch_size, num_workers=self.num_workers)


class StreamShardedByRank(SameStreamOnEveryRank):
    """The control: the same stream, sharded over the ranks too."""

    sharding = RankShardedWindows


class OneReplicaSampler(FixedClassification):
    """BUG: its DistributedSampler is told it has one replica (as a script made for one process tells it): Lightning
    leaves a DistributedSampler in place, and every rank reads the whole dataset in the same order."""

    def train_dataloader(self) -> DataLoader:
        sampler = DistributedSampler(self.train_dataset, num_replicas=1, rank=0, shuffle=True, seed=self.seed)
        return DataLoader(self.train_dataset, self.batch_size, sampler=sampler, num_workers=self.num_workers)


# ---------------------------------------------------------------- the same order every epoch


class ForgetfulSampler(Sampler):
    """A shuffling sampler with an epoch that it never uses: re-seeded alike on every pass."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed, self.epoch = size, seed, 0

    def __len__(self) -> int:
        return self.size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed)  # BUG: the epoch is left out of the seed
        yield from torch.randperm(self.size, generator=generator).tolist()


class EpochSampler(ForgetfulSampler):
    """The control: seeded with the epoch."""

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        yield from torch.randperm(self.size, generator=generator).tolist()


class SameOrderEveryEpoch(FixedClassification):
    """BUG: its sampler shuffles with one seed on every pass (set_epoch is there, and ignored)."""

    sampler = ForgetfulSampler

    def train_dataloader(self) -> DataLoader:
        sampler = self.sampler(len(self.train_dataset), self.seed)
        return DataLoader(self.train_dataset, self.batch_size, sampler=sampler, num_workers=self.num_workers)


class NewOrderEveryEpoch(SameOrderEveryEpoch):
    """The control: its sampler's seed holds the epoch."""

    sampler = EpochSampler


class SeededShuffle(FixedClassification):
    """The control: Lightning's plain shuffle, from a seeded generator that advances every epoch."""

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_dataset, self.batch_size, shuffle=True, generator=generator)


class ShuffledStream(IterableDataset):
    """A stream shuffled through a buffer seeded with `seed` plus `epoch` (set_epoch, as Hugging Face's streams)."""

    def __init__(self, dataset, seed: int, use_epoch: bool):
        self.dataset, self.seed, self.use_epoch, self.epoch = dataset, seed, use_epoch, 0

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rng = random.Random(self.seed + (self.epoch if self.use_epoch else 0))
        order = list(range(len(self.dataset)))
        rng.shuffle(order)
        for i in order:
            yield self.dataset[i]


class StreamOfOneOrder(FixedClassification):
    """BUG: a shuffled stream whose order is seeded alike every pass, its set_epoch never called."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(ShuffledStream(self.train_dataset, self.seed, use_epoch=False), self.batch_size)


# ---------------------------------------------------------------- ranks that part ways


class NudgeOneRank(pl.Callback):
    """BUG: at step `step`, rank 1 alone adds `by` to the first weight of every replicated (unsharded) parameter."""

    def __init__(self, step: int = 3, by: float = 1e-3):
        self.step, self.by = step, by

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank != 1 or trainer.global_step != self.step:
            return
        from torch.distributed.tensor import DTensor

        with torch.no_grad():
            for p in pl_module.model.parameters():
                if not isinstance(p, DTensor):
                    p.view(-1)[0] += self.by


class LateParameter(pl.Callback):
    """BUG: a parameter added to the model after it was wrapped (DDP) or sharded (FSDP), and given to the optimizer:
    nothing averages its gradient over the ranks, so each rank moves it by its own batch."""

    def on_fit_start(self, trainer, pl_module) -> None:
        model = pl_module.model
        vocab = model.token_embedding.num_embeddings
        model.register_parameter("late_bias", nn.Parameter(torch.zeros(vocab)))
        model.register_forward_hook(lambda module, args, output: output + module.late_bias)
        trainer.optimizers[0].param_groups[-1]["params"].append(model.late_bias)


class NudgeStepCount(pl.Callback):
    """BUG: at step `step`, rank 1's optimizer counts one step more (as a rank that restored another checkpoint)."""

    def __init__(self, step: int = 3):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank != 1 or trainer.global_step != self.step:
            return
        for state in trainer.optimizers[0].state.values():
            if "step" in state:
                state["step"] += 1


# ---------------------------------------------------------------- the precision asked for


class AutocastOff(nn.Module):
    """BUG: the model's forward turns autocast off for all of itself (ported from a script that managed its own).
    Inside, the built-in transformer, built from the same keys (model=transformer model._target_=...)."""

    def __init__(self, vocab_size: int, **kwargs):
        super().__init__()
        from harness.models import Transformer

        self.inner = Transformer(vocab_size=vocab_size, **kwargs)
        self.token_embedding = self.inner.token_embedding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast(input_ids.device.type, enabled=False):
            return self.inner(input_ids)


class LowPrecisionLoss(Loss):
    """BUG: the log-probabilities taken in the logits' own dtype (bf16 under bf16-mixed), not float32."""

    def per_position(self, logits, targets, loss_mask):
        safe = torch.where(loss_mask, targets, torch.zeros_like(targets))
        return -logits.log_softmax(dim=-1).gather(-1, safe[..., None])[..., 0].float()


class MeanOfItsOwn(Loss):
    """A loss with its own __call__ (cross entropy over the masked positions, as a fork writes it): the harness reads
    its value as the micro-batch's masked mean and weighs it by the count."""

    def __call__(self, logits, targets, loss_mask):
        return torch.nn.functional.cross_entropy(logits[loss_mask].float(), targets[loss_mask])


# ---------------------------------------------------------------- a rank that dies or stops


class FaultAt(pl.Callback):
    """A callback (+callbacks.fault) that makes rank `rank` fail as its step `step` begins: `kill` (SIGKILL, as the
    out-of-memory killer does), `stop` (SIGSTOP: a process frozen whole), `hang` (its main thread blocked for good
    while its other threads run, as a read from a stuck filesystem blocks), or `raise` (an error of its own, as a
    bug that one rank's data meets). Once a run dir: the run resumed there trains on."""

    def __init__(self, rank: int, step: int, fault: str = "kill"):
        self.rank, self.step, self.fault = rank, step, fault

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        import os
        import signal
        import threading

        done = Path(trainer.default_root_dir) / f".fault_{self.rank}_{self.step}"
        if trainer.global_rank != self.rank or trainer.global_step != self.step or done.exists():
            return
        import time

        done.write_text(f"{time.time()}\n")  # when it struck: the test measures from here
        if self.fault == "hang":
            threading.Event().wait()
        if self.fault == "raise":
            raise ValueError(f"rank {self.rank}'s own bug")
        os.kill(os.getpid(), signal.SIGKILL if self.fault == "kill" else signal.SIGSTOP)


class Slow(pl.Callback):
    """A callback (+callbacks.slow) that makes rank `rank` slow but moving: `step_s` seconds after each step,
    `val_s` after each validation batch, and `checkpoint_s` once inside each checkpoint's save: the others wait
    for it in a collective meanwhile."""

    def __init__(self, rank: int = 0, step_s: float = 0.0, val_s: float = 0.0, checkpoint_s: float = 0.0):
        self.rank, self.step_s, self.val_s, self.checkpoint_s = rank, step_s, val_s, checkpoint_s

    def wait(self, trainer, seconds: float) -> None:
        import time

        if trainer.global_rank == self.rank:
            time.sleep(seconds)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.wait(trainer, self.step_s)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self.wait(trainer, self.val_s)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.wait(trainer, self.checkpoint_s)
