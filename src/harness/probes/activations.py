"""What every module outputs during the training forward: `Activations`.

On its logging steps only, forward hooks on every module whose output is a tensor (the names picked by
`include` / `exclude`, fnmatch patterns such as `blocks.*.mlp.*`) take, on the device, the output's RMS and
mean, and by the module's kind:

    ReLU-like (ReLU, GELU, SiLU, ...)   act/<module>/zero_frac   the fraction of outputs exactly zero
                                        act/<module>/dead_frac   the fraction of units (the last axis) at
                                                                 |y| <= 1e-6 at every position of the batch
    tanh-like (Tanh, Hardtanh, ...)     act/<module>/saturated   the fraction with |y| > 0.97
    sigmoid-like (Sigmoid, ...)         act/<module>/saturated   the fraction with y < 0.03 or y > 0.97

The kind is read from the module's class name, so third-party activations (transformers' NewGELUActivation,
x-transformers' ReLUSquared) count too; one applied through torch.nn.functional has no module and is seen only
in the output of the module around it. The hooks exist from the step's start to its backward: the training
forward alone, once per micro-batch, not the probes' own forwards (hence this entry's place after theirs in
conf/probes/default.yaml). Everything reaches the host in one transfer at the end of the step; on the other
steps no hook is registered at all. The statistics take no float32 copy of an output (a bf16 logits tensor
is the largest of a step): reductions accumulate in float32, comparisons make one boolean tensor."""

from __future__ import annotations

import fnmatch
import logging
import math
import re

import torch
from torch import nn

from harness.probes.base import Probe

log = logging.getLogger(__name__)

#: class-name patterns (case-insensitive, searched) of the nonlinearities each statistic is taken after
RELU_LIKE = r"relu|gelu|silu|swish|mish|elu|softplus"
TANH_LIKE = r"^(hard)?tanh$|^softsign$|^tanhactivation$"
SIGMOID_LIKE = r"^(hard)?sigmoid$|^sigmoidactivation$"
#: an output this close to a limit is saturated: tanh's derivative there is below 0.06, sigmoid's below 0.03
SATURATED = 0.97
#: a ReLU-like unit this close to zero at every position passes (almost) no gradient: dead. Exact zeros for a
#: ReLU; a GELU or SiLU far on its negative side gives tiny negatives, never exactly zero
DEAD = 1e-6


def kind_of(module: nn.Module) -> str | None:
    """'relu', 'tanh', 'sigmoid' (the statistic the module's outputs get beyond RMS and mean), or None."""
    name = type(module).__name__.lower()
    if re.search(TANH_LIKE, name):
        return "tanh"
    if re.search(SIGMOID_LIKE, name):
        return "sigmoid"
    if re.search(RELU_LIKE, name):
        return "relu"
    return None


def output_stats(output: torch.Tensor, kind: str | None) -> list[torch.Tensor]:
    """0-dim tensors on the device, no sync: the output's norm and sum (float32 accumulators, no float32 copy),
    then by kind: ReLU-like, how many outputs are exactly zero and how many units (the last axis) are alive
    somewhere in the batch; tanh- and sigmoid-like, how many are saturated. Two kernels for most modules."""
    y = output.detach()
    stats = [torch.linalg.vector_norm(y, dtype=torch.float32), y.sum(dtype=torch.float32)]
    if kind == "relu":
        alive = y.abs() > DEAD
        alive = alive.flatten(0, -2).any(dim=0) if y.ndim > 1 else alive
        stats += [(y == 0).sum(dtype=torch.float32), alive.sum(dtype=torch.float32)]
    elif kind == "tanh":
        stats.append((y.abs() > SATURATED).sum(dtype=torch.float32))
    elif kind == "sigmoid":
        stats.append(((y < 1 - SATURATED) | (y > SATURATED)).sum(dtype=torch.float32))
    return stats


def summarize(name: str, kind: str | None, calls: list[tuple[int, int, list[float]]]) -> dict[str, float]:
    """One module's metrics from its calls' (outputs, units, stats), over all of them: RMS and mean, and the
    fractions of its kind (dead units: the mean over the calls)."""
    count = sum(numel for numel, _, _ in calls)
    metrics = {
        f"act/{name}/rms": math.sqrt(sum(v[0] ** 2 for _, _, v in calls) / count),
        f"act/{name}/mean": sum(v[1] for _, _, v in calls) / count,
    }
    if kind == "relu":
        metrics[f"act/{name}/zero_frac"] = sum(v[2] for _, _, v in calls) / count
        metrics[f"act/{name}/dead_frac"] = sum(1 - v[3] / units for _, units, v in calls) / len(calls)
    elif kind is not None:
        metrics[f"act/{name}/saturated"] = sum(v[2] for _, _, v in calls) / count
    return metrics


class Activations(Probe):
    """Every `every` steps: `act/<module>/rms`, `act/<module>/mean`, and `act/<module>/zero_frac` and
    `dead_frac` (ReLU-like) or `act/<module>/saturated` (tanh- and sigmoid-like) of the training forward's
    outputs. A module called several times in one forward (a shared activation, a cell applied at every
    position) gets the mean; with gradient accumulation, the step's first micro-batch is read."""

    def __init__(
        self, every: int | None = 20, include: list[str] | None = None, exclude: list[str] | None = None
    ):
        super().__init__(every)
        self.include = list(include) if include is not None else ["*"]
        self.exclude = list(exclude or [])
        self.modules: list[tuple[str, nn.Module, str | None]] = []
        self.handles: list = []
        self.calls: list[tuple[str, int, int, list[torch.Tensor]]] = []  # name, outputs, units, stats
        self.step: int | None = None
        self.read_step: int | None = None  # the last step read: its other micro-batches are not

    def picks(self, name: str) -> bool:
        """Whether the module called `name` is watched: it matches an `include` pattern and no `exclude` one."""
        matches = lambda patterns: any(fnmatch.fnmatchcase(name, p) for p in patterns)  # noqa: E731
        return bool(name) and matches(self.include) and not matches(self.exclude)

    def on_train_start(self, trainer, pl_module) -> None:
        if pl_module.__dict__.get("train_forward", pl_module.model) is not pl_module.model:
            log.warning(
                "activations probe off: compile=true runs a compiled forward, whose modules it cannot hook"
            )
            return
        self.modules = [(n, m, kind_of(m)) for n, m in pl_module.model.named_modules() if self.picks(n)]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.modules and trainer.is_global_zero and self.due(step) and step != self.read_step:
            self.step = self.read_step = step
            self.handles = [m.register_forward_hook(self.hook(n, kind)) for n, m, kind in self.modules]

    def hook(self, name: str, kind: str | None):
        def record(module, inputs, output) -> None:
            if isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
                units = output.shape[-1] if output.ndim else 1
                self.calls.append((name, output.numel(), units, output_stats(output, kind)))

        return record

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.remove()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.remove()
        if self.step is None or not self.calls:
            return
        values = iter(torch.stack([t for *_, stats in self.calls for t in stats]).tolist())  # one transfer
        by_module: dict[str, list] = {}
        for name, numel, units, stats in self.calls:
            by_module.setdefault(name, []).append((numel, units, [next(values) for _ in stats]))
        kinds = {n: kind for n, _, kind in self.modules}
        metrics = {}
        for name, calls in by_module.items():
            metrics.update(summarize(name, kinds[name], calls))
        self.sink.add(self.step, metrics)
        self.calls, self.step = [], None

    def on_train_end(self, trainer, pl_module) -> None:
        self.remove()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.remove()  # a forward that raised leaves no hook behind
        self.calls, self.step = [], None

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
