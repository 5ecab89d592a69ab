"""`GradByPosition`: input_grad_by_position on a fixed batch at the start ("init"), every K steps and at the
end ("final"): verdict.json `grad_by_position`, `reach_init`, `reach_final`, and grad_by_position.png."""

from __future__ import annotations

import logging

import torch

from harness.config.groups.probes import GradByPositionKeys
from harness.probes.probe import Probe, checked_declared
from harness.probes.tokens.datapoints import first_examples_batch
from harness.probes.tokens.reach import input_grad_by_position, reach
from harness.probes.trackers import has_tracker, log_image, own_randomness
from harness.train.distributed.shard_sums import any_sharded

log = logging.getLogger(__name__)

#: where a checkpoint keeps the profiles measured so far, so that a resumed run's "init" is the first run's
STATE = "probes.grad_by_position"


class GradByPosition(Probe):
    """`grad_by_position/reach` every `every` steps on the first `examples` training examples."""

    def __init__(self, every: int | None = 100, examples: int = 4):
        super().__init__(every)
        self.examples = checked_declared(GradByPositionKeys, "examples", examples)
        self.profiles: dict[int, list[float]] = {}  # step -> norm per position
        self.init: list[float] | None = None
        self.final: list[float] | None = None
        self.batch: dict[str, torch.Tensor] | None = None
        self.sharded = False

    def on_train_start(self, trainer, pl_module) -> None:
        if not hasattr(pl_module.model, "token_embedding"):
            log.warning(
                "grad_by_position probe off: the model has no `token_embedding` (see docs/contracts.md, Model)"
            )
            return
        # sharded (trainer=fsdp): its forward and backward gather each block from every rank, so every rank
        # measures the same fixed batch in step (torch.autograd.grad: no parameter's gradient is touched)
        self.sharded = any_sharded(pl_module.parameters())
        self.batch = first_examples_batch(self.run.data, "train", self.examples)
        if (
            self.init is None
        ):  # a resumed run kept the first run's, measured at its start (on_load_checkpoint)
            self.init = self.measure(trainer, pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[STATE] = {"init": self.init, "profiles": [[k, v] for k, v in self.profiles.items()]}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        kept = checkpoint.get(STATE) or {}
        self.init, self.profiles = kept.get("init"), {int(k): v for k, v in kept.get("profiles") or []}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step > 0 and self.due(trainer.global_step):
            self.measure(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.final = self.measure(trainer, pl_module)
        if self.batch is None or not trainer.is_global_zero:
            return
        tracker, path = has_tracker(trainer), self.run.file("grad_by_position.png", plot=True)
        if not (path or tracker):
            return
        from harness.probes.figures import grad_by_position_figure, save_figure, to_rgb

        earlier = sorted(step for step in self.profiles if step != trainer.global_step)
        shown = earlier[:1] + earlier[1:][:: max(1, len(earlier[1:]) // 4)]  # init and about 4 more: readable
        series = {("init" if i == 0 else f"step {step}"): self.profiles[step] for i, step in enumerate(shown)}
        series["final"] = self.final
        figure = grad_by_position_figure(series)
        if path:
            save_figure(figure, path)
        if tracker:
            log_image(trainer, "grad_by_position", to_rgb(figure), trainer.global_step)

    def measure(self, trainer, pl_module) -> list[float] | None:
        """‖∂L/∂e_t‖ per position now, on its own random stream (rank 0, or every rank in step under
        sharding)."""
        if self.batch is None or not (trainer.is_global_zero or self.sharded):
            return None
        device = pl_module.device
        with own_randomness(device):
            norms = input_grad_by_position(
                pl_module.model, {k: v.to(device) for k, v in self.batch.items()}, self.run.loss
            )
        if not trainer.is_global_zero:
            return None
        norms = norms.tolist()
        step = trainer.global_step
        self.profiles[step] = norms
        self.sink.add(step, {"grad_by_position/reach": reach(norms)})
        return norms

    def verdict_items(self) -> dict:
        if self.init is None:
            return {}
        final = self.final if self.final is not None else self.init
        return {
            "grad_by_position": {"init": self.init, "final": final},
            "reach_init": reach(self.init),
            "reach_final": reach(final),
        }
