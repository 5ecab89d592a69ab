"""Every rank holds the same model: `RankAgreement` compares replicated parameters' bit checksums and the
optimizer's step count across ranks (one all-reduce); a difference is `ranks_diverged`. Axes: value."""

from __future__ import annotations

import torch
import torch.distributed as dist
from einops import rearrange

from harness.probes.layers.norms import parameter_names
from harness.probes.probe import Probe
from harness.report.symptoms import Symptom
from harness.train.distributed.shard_sums import gathered, is_shard

# Ranks drift apart silently: a parameter added after wrapping (DDP's hooks and FSDP's units never see it), a
# callback changing weights on one rank, a rank restoring another checkpoint. A sharded parameter is held once:
# only the parameters FSDP does not manage, and the step count, are compared.

#: a float dtype's bits, read as the integer type of their size
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def checksum(tensor: torch.Tensor) -> torch.Tensor:
    """0-dim int64: the sum of `tensor`'s bits read as integers (changed by any changed bit)."""
    return tensor.detach().view(BITS[tensor.element_size()]).sum(dtype=torch.int64)


def _step_count(optimizer, device) -> torch.Tensor:
    """0-dim int64: the optimizer's own step count (Adam's `step`; 0 where it keeps none)."""
    for state in optimizer.state.values():
        if "step" in state:
            return torch.as_tensor(state["step"]).to(device=device, dtype=torch.int64)
    return torch.zeros((), dtype=torch.int64, device=device)


class RankAgreement(Probe):
    """Every `every` steps on several ranks: replicated weights and step count compared; `ranks_diverged`."""

    def __init__(self, every: int | None = 10):
        super().__init__(every)
        self.names: list[str] = []
        self.params: list[torch.nn.Parameter] = []
        self.checked = -1  # the step compared last (the micro-batches of one step share it)
        self.diverged = False

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.world_size < 2 or not dist.is_initialized():
            return
        replicated = [(name, p) for name, p in parameter_names(pl_module) if not is_shard(p)]
        self.names = [name for name, _ in replicated] + ["optimizer step count"]
        self.params = [p for _, p in replicated]
        self.device = trainer.strategy.root_device

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - 1  # the update just applied
        if not self.names or self.diverged or step < 0 or step == self.checked or not self.due(step):
            return
        self.checked = step
        sums = [checksum(p).to(self.device) for p in self.params]
        values = rearrange([*sums, _step_count(trainer.optimizers[0], self.device)], "value -> value")
        extremes = torch.cat([values, -values])
        dist.all_reduce(extremes, op=dist.ReduceOp.MAX)  # [max, -min] of every value: one collective
        apart = (extremes[: len(values)] != -extremes[len(values) :]).nonzero()
        if len(apart) == 0:
            return
        self.diverged = True
        every = gathered(values)  # [rank, value]: which ranks differ, once
        first = int(apart[0])
        ranks = [r for r in range(len(every)) if every[r, first] != every[0, first]]
        if trainer.is_global_zero:
            more = (
                f" (and {len(apart) - 1} more of the {len(values)} values compared)" if len(apart) > 1 else ""
            )
            detail = (
                f"after the update of step {step}, the {self.names[first]} of rank{'s' * (len(ranks) > 1)} "
                f"{', '.join(map(str, ranks))} differs from rank 0's{more}: the ranks no longer train one model"
            )
            self.sink.report(Symptom("ranks_diverged", step, self.names[first], float(len(apart)), detail))
