"""The `Symptoms` probe: reads the probes' rows and the training loss, and reports what a person would spot in
the charts; rules mixed in from loss_curve.py, gradient_health.py, dead_saturated.py."""

from __future__ import annotations

from dataclasses import asdict, fields

import torch

from harness.errors import ConfigError
from harness.probes.detectors.dead_saturated import ActivationRules
from harness.probes.detectors.detector import Limits, Streaks, field_names_text
from harness.probes.detectors.gradient_health import GradientRules, blocks_of
from harness.probes.detectors.loss_curve import LossRules
from harness.probes.layers.norms import parameter_names
from harness.probes.probe import Probe
from harness.report.symptoms import Symptom
from harness.train.optim import embedding_weights


class Symptoms(LossRules, GradientRules, ActivationRules, Probe):
    """Detects the symptoms the package lists, by the thresholds in Limits; `fail`: end as SYMPTOM (exit 5)."""

    def __init__(self, every: int | None = 10, fail: bool = False, **limits):
        super().__init__(every)
        self.fail = fail
        unknown = sorted(set(limits) - {f.name for f in fields(Limits)})
        if unknown:
            raise ConfigError(
                unknown[0],
                limits[unknown[0]],
                f"no such threshold; the detectors' are {field_names_text(Limits)}",
            )
        # each threshold an attribute of its own, as the mixed-in rules read them
        self.__dict__.update(asdict(Limits(**limits)))
        self.blocks: list[tuple[str, list[str], list[int]]] = []
        self.matrices: list[str] = []
        self.ratio_key = self.block_key = None
        self.base_lr = self.lr = None
        self.listened = None  # the sink this probe reads
        self.reset()

    def reset(self) -> None:
        """What one fit has seen: nothing yet."""
        self.pending_losses: list[torch.Tensor] = []  # on the device, since the last reading
        self.read_values: dict[int, list[float]] = {}  # losses read to the host by the step that queued them
        self.losses: list[float] = []  # the first 5 optimizer steps' and the latest, on the host
        self.steps_read = 0
        self.spike_events: list[list[int]] = []  # [first step, last step] of each run of spike steps
        self.lowest: float | None = None  # the loss's lowest running median, the initial loss included
        self.climb_start: int | None = None  # the first step of the running median's climb past diverge_rise
        self.grad_totals: list[float] = []
        self.total_step: int | None = None  # the step of the latest grad_norm/total read
        self.total_period: int | None = None  # the steps between two of them, where over 1
        self.streaks = Streaks()
        self.first_ratio: float | None = None
        self.ending = False
        self.reported: set[tuple[str, str]] = set()
        self.activation_keys: list[tuple[str, str, str]] | None = None
        self.first_readings: dict[str, float] = {}  # each place's first reading of each statistic

    def on_train_start(self, trainer, pl_module) -> None:
        self.reset()
        if self.listened is not self.sink:
            self.sink.listen(self.read)
            self.listened = self.sink
        embedded = embedding_weights(
            pl_module
        )  # sparse, row by row: neither a block's nor a matrix's measure
        named = [(n, p) for n, p in parameter_names(pl_module) if p.requires_grad and id(p) not in embedded]
        sizes = {n: p.numel() for n, p in named}
        self.blocks = [(b, ps, [sizes[p] for p in ps]) for b, ps in blocks_of([n for n, _ in named])]
        self.matrices = [n for n, p in named if p.ndim >= 2]
        # the keys that say a row holds what a check reads (looked up every step: built once)
        self.ratio_key = f"update_ratio/{self.matrices[0]}" if self.matrices else None
        self.block_key = f"grad_norm/{self.blocks[0][1][0]}" if self.blocks else None
        group = trainer.optimizers[0].param_groups[0] if trainer.optimizers else {}
        self.base_lr = group.get("initial_lr", group.get("lr"))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # once an optimizer step (not a micro-batch): the loss it follows, kept on the device
        loss = getattr(pl_module, "last_loss", None)  # detached already (HarnessModule)
        if loss is not None and trainer.is_global_zero:
            self.pending_losses.append(loss)
        self.lr = getattr(pl_module, "step_lr", None)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - 1  # the step whose row the sink files (global_step has moved past it)
        if trainer.is_global_zero and self.due(step):
            self.defer_losses(step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.ending = True  # the rows flushed from here on are the end of training's
        # the last step's loss, global_step having moved past it
        self.read_losses(trainer.global_step - 1, kept=True)

    def on_exception(self, trainer, pl_module, exception) -> None:
        # a step that raised (NonFinite) follows the losses read here
        self.read_losses(trainer.global_step, kept=True)

    def read(self, step: int, row: dict) -> None:
        """The sink's row of `step` (called at each flush): the checks whose numbers it holds."""
        total = row.get("grad_norm/total")
        if total is not None:
            self.check_exploding(step, total)
        if "grad_by_position/reach" in row:
            self.check_reach(step, row["grad_by_position/reach"])
        if self.ratio_key in row:
            self.check_update_ratios(step, row)
        if not self.due(step):
            return
        self.read_losses(step)
        self.check_growth(step)
        if self.block_key in row:
            self.check_blocks(step, row)
        self.check_activations(step, row)

    def report(
        self,
        name: str,
        step: int,
        where: str,
        value: float | None,
        detail: str,
        fix: str = "",
        now=None,
        side="",
    ) -> None:
        """One symptom to the sink, once per name and `side`, its count logged at step `now` (default:
        `step`)."""
        if (name, side) in self.reported:
            return
        self.reported.add((name, side))
        self.sink.report(Symptom(name, step, where, value, detail, fix), now=step if now is None else now)
