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


def output_stats(output: torch.Tensor, kind: str | None) -> torch.Tensor:
    """Float[4] on the device, no sync: RMS, mean, and the kind's fractions (zero and dead units, or
    saturated; nan where a kind has none)."""
    y = output.detach()
    count = y.numel()
    rms = torch.linalg.vector_norm(y, dtype=torch.float32) / count**0.5
    mean = y.mean(dtype=torch.float32)
    none = torch.full((), float("nan"), device=y.device)
    if kind == "relu":
        first = (y == 0).sum(dtype=torch.float32) / count
        alive = (y.abs() > DEAD).flatten(0, -2).any(dim=0) if y.ndim > 1 else (y.abs() > DEAD)
        second = 1 - alive.float().mean()
    elif kind == "tanh":
        first, second = (y.abs() > SATURATED).sum(dtype=torch.float32) / count, none
    elif kind == "sigmoid":
        first = ((y < 1 - SATURATED) | (y > SATURATED)).sum(dtype=torch.float32) / count
        second = none
    else:
        first = second = none
    return torch.stack([rms, mean, first, second])


class Activations(Probe):
    """Every `every` steps: `act/<module>/rms`, `act/<module>/mean`, and `act/<module>/zero_frac` and
    `dead_frac` (ReLU-like) or `act/<module>/saturated` (tanh- and sigmoid-like) of the training forward's
    outputs. A module called several times in one forward (a shared activation, a cell applied at every
    position) gets the mean; with gradient accumulation, the step's first micro-batch is read."""

    def __init__(
        self, every: int | None = 10, include: list[str] | None = None, exclude: list[str] | None = None
    ):
        super().__init__(every)
        self.include = list(include) if include is not None else ["*"]
        self.exclude = list(exclude or [])
        self.modules: list[tuple[str, nn.Module, str | None]] = []
        self.handles: list = []
        self.outputs: dict[str, list[torch.Tensor]] = {}
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
                self.outputs.setdefault(name, []).append(output_stats(output, kind))

        return record

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.remove()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.remove()
        if self.step is None or not self.outputs:
            return
        names = list(self.outputs)
        stats = torch.stack(
            [torch.stack(self.outputs[n]).mean(dim=0) for n in names]
        ).tolist()  # one transfer
        kinds = {n: kind for n, _, kind in self.modules}
        metrics = {}
        for name, (rms, mean, first, second) in zip(names, stats, strict=True):
            metrics[f"act/{name}/rms"], metrics[f"act/{name}/mean"] = rms, mean
            if kinds[name] == "relu":
                metrics[f"act/{name}/zero_frac"], metrics[f"act/{name}/dead_frac"] = first, second
            elif kinds[name] is not None:
                metrics[f"act/{name}/saturated"] = first
        self.sink.add(self.step, metrics)
        self.outputs, self.step = {}, None

    def on_train_end(self, trainer, pl_module) -> None:
        self.remove()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.remove()  # a forward that raised leaves no hook behind
        self.outputs, self.step = {}, None

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
