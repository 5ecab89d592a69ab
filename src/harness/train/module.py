"""The LightningModule, `HarnessModule`: any Model trained on the configured loss weighed per token over the
step (step_loss.py), with its optimizer, schedule and metrics; `position_stats`."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytorch_lightning as pl
import torch
from einops import rearrange
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities import GradClipAlgorithmType
from torch import nn

from harness.compat import lightning_logs_now
from harness.ops.loss import CrossEntropy, Loss, own_reduction
from harness.train.optim import adamw, optimizer_and_schedule, unfused_where_sharded
from harness.train.perf.readout import readout_of
from harness.train.step_loss import StepLoss

log = logging.getLogger(__name__)


def position_stats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Float[stat, b, time], detached: p(target), entropy, top-1 mass, target alone most probable (0/1)."""
    # six passes over the vocabulary, one tensor the logits' size: p = e/Σe, top-1 = 1/Σe, entropy = lse - E_p[logit];
    # no softmax (a second tensor), no max/argmax or product tensor (slower on CPU); error ~1e-7 x the logits' size
    with torch.no_grad():
        logits = logits.detach().float()
        top = logits.amax(dim=-1, keepdim=True)
        e = torch.sub(logits, top).exp_()  # 1 at the top logit; ours to overwrite below
        total = e.sum(dim=-1)
        # a target outside the loss mask may be anything (-100, a pad id past the vocabulary): read as the nearest
        # class, its statistics are never counted (masked_metrics)
        index = targets.clamp(0, logits.shape[-1] - 1)[..., None]
        e_target = e.gather(-1, index)[..., 0]
        rival = e.scatter_(-1, index, -1.0).amax(dim=-1)  # the most probable other token
        # Σ e·logit, the target's entry (now -1) put back: -logit + (1 + e_target)·logit = e_target·logit
        dot = e.mul_(logits).sum(dim=-1) + (1 + e_target) * logits.gather(-1, index)[..., 0]
        entropy = (top[..., 0] + total.log() - dot / total).clamp_min(0)
        stats = [e_target / total, entropy, total.reciprocal(), (e_target > rival).float()]
        return rearrange(stats, "stat b time -> stat b time")


def step_stats(outputs: dict, batch: dict) -> torch.Tensor:
    """The training step's position_stats, computed once and kept in `outputs` for the module and the probes."""
    if outputs.get("position_stats") is None:
        outputs["position_stats"] = position_stats(outputs["logits"], batch["targets"])
    return outputs["position_stats"]


def _masked_metrics(stats: torch.Tensor, loss_mask: torch.Tensor) -> dict:
    """Accuracy and p(correct) (the target's mean probability) over the masked positions, from position_stats."""
    mask = loss_mask.float()
    total = mask.sum()
    return {"acc": (stats[3] * mask).sum() / total, "p_correct": (stats[0] * mask).sum() / total}


class HarnessModule(pl.LightningModule):
    """Trains `model` on Batch dicts; logs loss, acc and p_correct under train/ and val/."""

    flushes_readout = (
        True  # its on_train_batch_end, the batch's last hook, copies the step's values to the host
    )

    def __init__(
        self,
        model: nn.Module,
        loss: Loss | None = None,
        optimizer: Callable | None = None,
        schedule: Callable | None = None,
        total_steps: int = 1,
        compile: bool | str = False,
    ):
        """`loss`, `optimizer`, `schedule`: from the config; None: cross entropy, AdamW, constant rate."""
        super().__init__()
        self.model = model
        self.optimizer, self.schedule, self.total_steps = optimizer or adamw(), schedule, total_steps
        self.step_loss = StepLoss()  # every masked position of a step weighs the same, however it is split
        self.step_lr: float | None = None  # the learning rate the latest training step used
        self.step_logged = 0  # the step the latest training step's metrics are filed under
        self._logged_lr: torch.Tensor | None = None  # where step_lr is written on the device to be logged
        self.resumed_metrics: dict = {}  # the latest validation's metrics, as the checkpoint resumed from kept them
        self.loss = loss or CrossEntropy()
        # compile=true: the training step runs a compiled forward sharing the model's parameters. It is
        # kept out of the module tree (no `_orig_mod.` keys in state_dict and checkpoints), and everything else
        # (validation, the verdict's evaluation, probes and preflight checks, their hooks on `token_embedding`)
        # runs the plain model: same weights, and nothing they report can depend on the compiler.
        # A string names the torch.compile backend (true: its default, inductor).
        backend = compile if isinstance(compile, str) else "inductor"
        self.__dict__["train_forward"] = torch.compile(model, backend=backend) if compile else model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    @property
    def last_loss(self) -> torch.Tensor | None:
        """The latest optimizer step's loss, detached, the same on every rank; None before the first step."""
        return self.step_loss.value

    @last_loss.setter
    def last_loss(self, value: torch.Tensor | None) -> None:  # a resumed run's, from its checkpoint
        self.step_loss.value = value

    def final_loss(self) -> float | None:
        """The latest step's loss as a float (one host sync); None before the first step."""
        return None if self.last_loss is None else self.last_loss.item()

    def data_parallel(self) -> tuple[int, int]:
        """(ranks whose gradients are averaged, micro-batches a step accumulates)."""
        return self.trainer.world_size, self.trainer.accumulate_grad_batches

    def loss_and_metrics(self, batch: dict) -> tuple[torch.Tensor, dict]:
        """The plain model's loss on `batch`, and its metrics {loss, acc, p_correct}."""
        logits = self.model(batch["input_ids"])
        loss = self.loss(logits, batch["targets"], batch["loss_mask"])
        stats = position_stats(logits, batch["targets"])
        return loss, {"loss": loss.detach(), **_masked_metrics(stats, batch["loss_mask"])}

    def training_step(self, batch: dict, batch_idx: int) -> dict:
        logits = self.train_forward(batch["input_ids"])
        mean = self.loss(logits, batch["targets"], batch["loss_mask"])
        # the backward's loss: this micro-batch's share of the step's, by its count of masked positions (no sync)
        loss = self.step_loss.weigh(mean, batch["loss_mask"], *self.data_parallel())
        self.step_lr = self.trainer.optimizers[0].param_groups[0][
            "lr"
        ]  # this step's; the schedule moves on first
        self.step_logged = self.trainer.global_step  # the step Lightning files this step's metrics under
        # the logits, detached, for the metrics and the logit-mass probe (step_stats): no second forward pass
        return {"loss": loss, "logits": logits.detach()}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None) -> None:
        """The step, its gradients normalized (StepLoss.normalize) inside the closure, before anything reads
        them."""

        def closure():
            result = optimizer_closure()
            self.step_loss.normalize(self.model.parameters(), *self.data_parallel())
            return result

        optimizer.step(closure=closure)

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Lightning's, but under bf16-mixed with a fused optimizer (the default): there it refuses to clip, for
        fp16's sake (a fused step undoes the loss scale itself), though bf16 has no loss scale to undo."""
        plugin = self.trainer.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.scaler is None and gradient_clip_val:
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
            Precision.clip_gradients(
                plugin, optimizer, gradient_clip_val, algorithm
            )  # the true gradients, clipped
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_start(self) -> None:
        for optimizer in self.trainer.optimizers:  # a parameter given to it since it was built
            unfused_where_sharded(optimizer)
        if own_reduction(self.loss) and self.trainer.is_global_zero and max(self.data_parallel()) > 1:
            log.warning(
                "loss: %s has a __call__ of its own: its value is read as each micro-batch's mean over its masked "
                "positions, and weighed by their count (every position of a step weighs the same: "
                "docs/contracts.md, Loss)",
                type(self.loss).__name__,
            )

    def on_train_batch_end(self, outputs: dict, batch: dict, batch_idx: int) -> None:
        # After the callbacks: a callback that stops the run at this step (StopAtTarget, EarlyStopping) makes
        # Lightning write this step's metrics, so they are logged here, not in training_step; and only on the
        # steps Lightning writes (every log_every_n_steps): the statistics are a pass over the logits.
        if not self.logs_now():
            return
        metrics = {"loss": self.last_loss, **_masked_metrics(step_stats(outputs, batch), batch["loss_mask"])}
        readout = readout_of(self._trainer)
        if readout is None:  # a Trainer without the harness's callbacks: Lightning's own logging
            self.log("lr", self._lr_on_device(), on_step=True, on_epoch=False)
            self.log_dict(
                {f"train/{k}": v for k, v in metrics.items()},
                on_step=True,
                on_epoch=False,
                batch_size=batch["input_ids"].shape[0],
            )
            return
        # the step's values, and what every callback queued, copied to the host at once (the readout's flush)
        step, epoch = self.step_logged, self.current_epoch
        values = {f"train/{k}": v for k, v in metrics.items() if v is not None}
        readout.defer(step, values, lambda read: self._logged(readout, step, {**read, "epoch": epoch}))
        readout.flush(self.trainer)

    def _logged(self, readout, step: int, values: dict[str, float]) -> None:
        """The step's metrics, read: to the loggers (with `lr`, a host float), and to callback_metrics, where
        checkpoints and early stopping look for them."""
        readout.add(step, {**values, "lr": self.step_lr})
        self.trainer.callback_metrics.update({k: torch.tensor(v) for k, v in values.items() if k != "epoch"})

    def _lr_on_device(self) -> torch.Tensor:
        """step_lr written into one tensor kept on the device: a float given to self.log becomes a new device tensor,
        a copy from the host, each time."""
        if self._logged_lr is None or self._logged_lr.device != self.device:
            self._logged_lr = torch.zeros((), device=self.device)
        return self._logged_lr.fill_(self.step_lr)

    def logs_now(self) -> bool:
        """Whether Lightning writes this step's logged values: every log_every_n_steps, and the last step."""
        return lightning_logs_now(self.trainer)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        _, metrics = self.loss_and_metrics(batch)
        # each batch weighed by its masked positions: the epoch's figure is the mean over every position of the split,
        # as a step's loss is; sync_dist: under DDP each rank validates its share, the sums and counts are added up
        self.log_dict(
            {f"val/{k}": v for k, v in metrics.items()},
            on_step=False,
            on_epoch=True,
            batch_size=int(batch["loss_mask"].sum()),
            sync_dist=True,
        )

    def configure_model(self) -> None:
        """Under a sharding strategy (sharding.FSDP), shard the model before the optimizer is built."""
        shard = getattr(self.trainer.strategy, "shard", None) if self._trainer is not None else None
        if shard is not None:
            shard(self.model)

    def configure_optimizers(self):
        optimizer, scheduler = optimizer_and_schedule(
            self.optimizer, self.schedule, self.model, self.total_steps
        )
        if scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
