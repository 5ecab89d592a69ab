"""mode=overfit (practice P3, P4): `Overfit` memorizes the first n training examples, one batch every step,
re-seeded, until the loss reaches `achievable_floor` + target_loss."""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from harness.data.batch import collate_of, first_items, indexable, to_device, training_mode
from harness.errors import ConfigError
from harness.ops.forward_calls import without_dropout
from harness.report.speed_section import wall_phrase
from harness.seeding import seed_all
from harness.train.perf.readout import readout_of

log = logging.getLogger(__name__)


class Head(Dataset):
    """The first `n` examples of a dataset, with their records; a stream's first n kept as it yielded them."""

    def __init__(self, dataset, n: int):
        self.dataset, self.n = dataset, n
        self.kept = None if indexable(dataset) else first_items(dataset, n)

    @property
    def available(self) -> int:
        """Examples the dataset holds, up to n."""
        return min(self.n, len(self.dataset) if self.kept is None else len(self.kept))

    def __len__(self) -> int:
        return self.available

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.dataset[i] if self.kept is None else self.kept[i]

    def record(self, i: int) -> dict:
        return self.dataset.record(i)


class OverfitData(pl.LightningDataModule):
    """The first `n` examples of `base`'s training split, as one fixed batch repeated `steps` times."""

    def __init__(self, base: pl.LightningDataModule, n: int, steps: int):
        super().__init__()
        self.base, self.n, self.steps = base, n, steps
        self.train_dataset = self.val_dataset = None

    @property
    def tokenizer(self):
        return self.base.tokenizer

    def prepare_data(self) -> None:
        self.base.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        self.base.setup(stage)
        head = Head(self.base.train_dataset, self.n)
        available = head.available
        if not available:
            raise ConfigError(
                "n", self.n, "the training split is empty; give data with at least one training example"
            )
        if self.n > available:
            raise ConfigError(
                "n",
                self.n,
                f"the training split has only {available} examples; "
                f"use n<={available} or a larger dataset (data.size)",
            )
        self.train_dataset = self.val_dataset = head
        # the fork's own collate (its padding, say) makes the batch, as its loaders would
        self.collate = collate_of(self.base.train_dataloader())

    def train_dataloader(self) -> DataLoader:
        same_batch_every_step = [list(range(self.n))] * self.steps
        return DataLoader(self.train_dataset, batch_sampler=same_batch_every_step, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_dataset, batch_size=self.n, shuffle=False, collate_fn=self.collate)

    def batch(self) -> dict:
        """The one batch every step sees."""
        return next(iter(self.val_dataloader()))


def achievable_floor(batch: dict) -> float:
    """The lowest mean loss any correct causal model can reach on `batch`: -log p_empirical(target | context)."""
    ids, targets, mask = (batch[k].tolist() for k in ("input_ids", "targets", "loss_mask"))
    counts: dict[tuple, Counter] = defaultdict(Counter)
    positions = [
        (_distinguishable(row[: t + 1]), targets[b][t])
        for b, row in enumerate(ids)
        for t in range(len(row))
        if mask[b][t]
    ]
    for context, target in positions:
        counts[context][target] += 1
    return sum(-math.log(counts[c][y] / sum(counts[c].values())) for c, y in positions) / len(positions)


def _distinguishable(context: list[int]) -> tuple:
    """What a causal model can know of a context: all of it, but the length of a run of one token."""
    return ("run", context[0]) if len(set(context)) == 1 else tuple(context)


class Reseed(pl.Callback):
    """Seeds every source of randomness before each training and validation step (practice P3)."""

    def __init__(self, seed: int):
        self.seed = seed

    def on_fit_start(self, trainer, pl_module) -> None:
        log.info("overfit mode: re-seeding torch, numpy and random with seed=%d before every step", self.seed)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        seed_all(self.seed)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        seed_all(self.seed)


class StopAtTarget(pl.Callback):
    """Stops training when the step's loss is within `target` of `floor`; remembers when."""

    def __init__(self, floor: float, target: float):
        self.floor, self.target = floor, target
        self.last_loss = math.inf
        self.reached_at: int | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the step's loss over every rank's positions (harness.train.step_loss: the same number on every rank), so
        # every rank stops at the same step, none is left waiting in an all-reduce; read with the step's other
        # values (harness.train.perf.readout; overfit mode logs every step), or on its own without a readout
        if pl_module.last_loss is None:  # a micro-batch before the first step's last one: no step loss yet
            return
        readout, step = readout_of(trainer), trainer.global_step
        if readout is None:
            self._read(trainer, step, pl_module.last_loss.item())
        else:
            readout.defer(
                step, {"loss": pl_module.last_loss}, lambda read: self._read(trainer, step, read["loss"])
            )

    def _read(self, trainer, step: int, loss: float) -> None:
        self.last_loss = loss
        if self.last_loss <= self.floor + self.target and self.reached_at is None:
            self.reached_at = step
            trainer.should_stop = True

    @property
    def passed(self) -> bool:
        return self.reached_at is not None


@torch.no_grad()
def evaluate(
    module: pl.LightningModule, batch: dict, training: bool = False, seed: int | None = None
) -> dict:
    """{loss, acc, p_correct} of `module` on `batch`: in eval mode, or in train mode re-seeded with `seed`."""
    if seed is not None:
        seed_all(seed)
    with training_mode(module, training):
        _, metrics = module.loss_and_metrics(to_device(batch, module.device))
    return {k: v.item() for k, v in metrics.items()}


#: a dropout rate this high or higher drops half of every layer's units each step: far above the usual 0.1-0.3
HIGH_DROPOUT = 0.5


def _scores_without_dropout(module: pl.LightningModule, batch: dict, seed: int) -> tuple[dict, float]:
    """evaluate() in train mode with every dropout off, and the highest dropout rate the forward asked for."""
    rates: list[float] = []
    with without_dropout(rates):
        scores = evaluate(module, batch, training=True, seed=seed)
    return scores, max(rates, default=0.0)


def _scores_worse(evaluated: dict, reference: dict) -> bool:
    """Whether `evaluated` scores worse than `reference`: accuracy 0.1 lower, or loss doubled and 0.1 higher."""
    return evaluated["acc"] < reference["acc"] - 0.1 or evaluated["loss"] > max(
        2 * reference["loss"], reference["loss"] + 0.1
    )


def eval_gap(train: dict, evaluated: dict, plain: dict | None = None, dropout: float = 0.0) -> str | None:
    """Why memorized examples score worse in eval than train mode, or None; `plain`: dropout off."""
    scores = (
        f"in eval mode the same examples score accuracy {evaluated['acc']:.2f} and loss "
        f"{evaluated['loss']:.4f}, against {{acc:.2f}} and {{loss:.4f}} in train mode{{how}}"
    )
    # re-seeded dropout drops the same units every step, so train mode ends below eval mode on any correct model
    # with dropout: a gap is a warning only where dropout is off (`plain`) or far too high
    if plain is not None and _scores_worse(evaluated, plain):
        return (
            scores.format(**plain, how=" with every dropout off")
            + ": something other than dropout runs only in training or only in eval: a branch on "
            "self.training, batch statistics (BatchNorm) unlike their running averages, or randomness of "
            "your own (noise, a dropout written by hand)"
        )
    if dropout >= HIGH_DROPOUT and evaluated["acc"] < train["acc"] - 0.1:
        return (
            scores.format(**train, how="")
            + f": they were memorized only through the one dropout mask re-seeding repeats; dropout "
            f"{dropout:g} is far above the usual 0.1-0.3 (lower it)"
        )
    return None


class Overfit:
    """mode=overfit: PASS when the training loss reaches the floor plus `mode.target_loss`."""

    name = "overfit"

    def __init__(self, cfg):
        self.cfg, self.n = cfg, cfg.n
        self.batch: dict | None = None
        self.target: StopAtTarget | None = None

    def data(self, base: pl.LightningDataModule) -> OverfitData:
        return OverfitData(base, n=self.n, steps=self.cfg.mode.max_steps)

    def callbacks(self, data: OverfitData, verdict, checkpoints) -> list[pl.Callback]:
        self.batch = data.batch()
        verdict.floor = achievable_floor(self.batch)
        self.target = StopAtTarget(verdict.floor, self.cfg.mode.target_loss)
        return [self.target] + ([Reseed(self.cfg.seed)] if self.cfg.mode.reseed else [])

    def judge(self, verdict, trainer: pl.Trainer, module: pl.LightningModule, checkpoints) -> None:
        trainer.save_checkpoint(checkpoints / "last.ckpt")
        final = evaluate(module, self.batch)
        trained = evaluate(module, self.batch, training=True, seed=self.cfg.seed)
        verdict.status = "PASS" if self.target.passed else "FAIL"
        verdict.final_loss = self.target.last_loss
        verdict.val_loss = verdict.eval_loss = final["loss"]  # eval mode, on the same n examples
        verdict.accuracy = verdict.eval_accuracy = final["acc"]
        verdict.p_correct = final["p_correct"]
        verdict.train_accuracy = trained["acc"]  # train mode, re-seeded as a step: the final weights
        plain, dropout = _scores_without_dropout(module, self.batch, self.cfg.seed)
        verdict.eval_gap = eval_gap(trained, final, plain, dropout)

    def summary(self, verdict) -> str:
        goal = verdict.floor + self.cfg.mode.target_loss
        reached = "reached" if verdict.status == "PASS" else "did not reach"
        wall = wall_phrase(verdict.items.get("perf"), verdict.seconds)  # the process's whole time, by phase
        return (
            f"{verdict.status}: {verdict.model} ({verdict.model_group}) on n={verdict.n} {verdict.data} "
            f"examples {reached} the goal in {verdict.steps} steps, {wall}: final loss "
            f"{verdict.final_loss:.4f}, goal {goal:.4f} (floor {verdict.floor:.4f} + target "
            f"{self.cfg.mode.target_loss}); eval mode: accuracy {verdict.accuracy:.2f}, "
            f"p(correct) {verdict.p_correct:.3f}"
        )
