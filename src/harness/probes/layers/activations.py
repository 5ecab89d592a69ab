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
x-transformers' ReLUSquared) count too; a module that holds others is none, whatever its name; torch's nn.RNN
counts by its nonlinearity (its output sequence is the tanh's, or the ReLU's). An activation called as a function in a forward (`torch.relu`,
`F.gelu`, `x.tanh()`, `torch.sigmoid`, ...: FUNCTIONS) has no module: a TorchFunctionMode (harness.ops.forward_calls) sees
those calls and logs them under the module whose forward made them, `act/<module>/<function>/...`
(`act/forward/<function>/...` for the model's own forward); an activation module's own call is not counted
twice. A model whose forward called none is watched for them again every RECHECK readings only. The hooks and
the mode exist from the step's start to its backward: the training forward alone, once per micro-batch, not
the probes' own forwards (hence this entry's place after theirs in conf/probes/default.yaml). Everything
reaches the host in one transfer at the end of the step; on the other steps no hook is registered at all.
The statistics take no float32 copy of an output (a bf16 logits tensor is the largest of a step): reductions
accumulate in float32, comparisons make one boolean tensor."""

from __future__ import annotations

import fnmatch
import logging
import math
import re

import torch
from torch import nn
from torch.nn import functional as F

from harness.compat import torch_function_off
from harness.ops.forward_calls import Intercept
from harness.probes.probe import Probe

log = logging.getLogger(__name__)

#: class-name patterns (case-insensitive, searched) of the nonlinearities each statistic is taken after
RELU_LIKE = r"relu|gelu|silu|swish|mish|elu|softplus"
TANH_LIKE = r"^(hard)?tanh$|^softsign$|^tanhactivation$"
SIGMOID_LIKE = r"^(hard)?sigmoid$|^sigmoidactivation$"
#: activations called as functions: the torch function -> (its name in the metrics, its kind). F.tanh and
#: F.sigmoid call the tensor methods, which are here
FUNCTIONS = {
    **dict.fromkeys(
        (torch.relu, torch.relu_, F.relu, F.relu_, torch.Tensor.relu, torch.Tensor.relu_), ("relu", "relu")
    ),
    **{
        f: (f.__name__, "relu")
        for f in (F.relu6, F.gelu, F.silu, F.mish, F.elu, F.selu, F.celu, F.leaky_relu)
    },
    **{f: (f.__name__, "relu") for f in (F.softplus, F.hardswish)},
    **dict.fromkeys((torch.tanh, torch.tanh_, torch.Tensor.tanh, torch.Tensor.tanh_), ("tanh", "tanh")),
    F.hardtanh: ("hardtanh", "tanh"),
    F.softsign: ("softsign", "tanh"),
    **dict.fromkeys(
        (torch.sigmoid, torch.sigmoid_, torch.Tensor.sigmoid, torch.Tensor.sigmoid_, torch.special.expit),
        ("sigmoid", "sigmoid"),
    ),
    F.hardsigmoid: ("hardsigmoid", "sigmoid"),
}
#: a model whose watched forward called no activation function is watched again every this many readings
RECHECK = 10
#: an output this close to a limit is saturated: tanh's derivative there is below 0.06, sigmoid's below 0.03
SATURATED = 0.97
#: a ReLU-like unit this close to zero at every position passes (almost) no gradient: dead. Exact zeros for a
#: ReLU; a GELU or SiLU far on its negative side gives tiny negatives, never exactly zero
DEAD = 1e-6


def kind_of(module: nn.Module) -> str | None:
    """'relu', 'tanh', 'sigmoid' (the statistic the module's outputs get beyond RMS and mean), or None. An
    activation is a leaf: a module holding others (a `ReluMLP`, a model named `DeadReLUNet`) is not one, whatever
    its name says, and the activation functions its forward calls are read."""
    if isinstance(module, nn.RNN):  # its output sequence is its nonlinearity's: tanh(...) or relu(...)
        return "tanh" if module.nonlinearity == "tanh" else "relu"
    if next(module.children(), None) is not None:
        return None
    name = type(module).__name__.lower()
    if re.search(TANH_LIKE, name):
        return "tanh"
    if re.search(SIGMOID_LIKE, name):
        return "sigmoid"
    if re.search(RELU_LIKE, name):
        return "relu"
    return None


def _may_call(module: nn.Module, kind: str | None) -> bool:
    """Whether `module`'s forward may call an activation function: any but torch's own layers without children
    (Linear, LayerNorm, Dropout, Embedding, ...), whose forward calls none; an activation module counts (its
    own call of the function is its hook's to read)."""
    builtin_leaf = type(module).__module__.startswith("torch.nn.") and next(module.children(), None) is None
    return kind is not None or not builtin_leaf


def _output_stats(output: torch.Tensor, kind: str | None) -> list[torch.Tensor]:
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
    outputs, and the same of every activation function called in a module's forward as
    `act/<module>/<function>/...`. A module (or function) called several times in one forward (a shared
    activation, a cell applied at every position) gets the mean; with gradient accumulation, the step's first
    micro-batch is read."""

    def __init__(
        self, every: int | None = 20, include: list[str] | None = None, exclude: list[str] | None = None
    ):
        super().__init__(every)
        self.include = list(include) if include is not None else ["*"]
        self.exclude = list(exclude or [])
        self.modules: list[tuple[str, nn.Module, bool, bool]] = []  # every module, picked?, may it call one?
        self.kinds: dict[str, str | None] = {}  # every module's kind, and every function's key seen: its kind
        self.handles: list = []
        self.running: list[str] = []  # the modules whose forward is running, on a logging step
        self.mode: Intercept | None = None  # on a logging step: the activation functions' calls
        self.functions: bool | None = None  # whether the last watched forward called any (None: none watched)
        self.watched = False  # whether this reading watches the functions
        self.readings = 0
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
        self.kinds = {n: kind_of(m) for n, m in pl_module.model.named_modules()}
        self.modules = [
            (n, m, self.picks(n), _may_call(m, self.kinds[n])) for n, m in pl_module.model.named_modules()
        ]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.modules and trainer.is_global_zero and self.due(step) and step != self.read_step:
            self.step = self.read_step = step
            # the functions are watched while the model calls any; one that called none is looked at again
            # every RECHECK readings (watching costs a dispatch per torch call of the forward)
            watch = self.functions is not False or self.readings % RECHECK == 0
            self.readings += 1
            # a pre-hook on each module whose forward may call an activation function (it says whose forward
            # runs; the model's own starts the mode), a hook that reads the output of those picked
            self.handles = [
                m.register_forward_pre_hook(self.enter(n))
                for n, m, _, calls in self.modules
                if watch and calls
            ]
            self.handles += [
                m.register_forward_hook(self.leave(n, picked, watch and calls), always_call=True)
                for n, m, picked, calls in self.modules
                if picked or (watch and calls)
            ]
            self.watched = watch

    def enter(self, name: str):
        def hook(module, args) -> None:
            self.running.append(name)
            if not name and self.mode is None:  # the model's forward starts: the functions' calls are read
                self.mode = Intercept(dict.fromkeys(FUNCTIONS, self.function)).__enter__()

        return hook

    def leave(self, name: str, picked: bool, calls: bool):
        kind = self.kinds[name]

        def hook(module, inputs, output) -> None:
            if calls and self.running:
                self.running.pop()
            if not name:
                self.stop()
            if picked:
                self.record(name, kind, output)

        return hook

    def record(self, name: str, kind: str | None, output) -> None:
        if kind is not None and isinstance(output, tuple):  # nn.RNN: (the output sequence, the last state)
            output = output[0]
        # in a module's hook the mode is on: the probe's own tensor calls need not pass through it
        with torch_function_off():
            if isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
                units = output.shape[-1] if output.ndim else 1
                self.calls.append((name, output.numel(), units, _output_stats(output, kind)))

    def function(self, func, args, kwargs):
        """An activation function's call (an Intercept handler): read under `<module>/<function>` when a
        watched module's own forward makes it (not an activation module's: its hook reads that call)."""
        result = func(*args, **kwargs)
        owner = self.running[-1] if self.running else None
        if owner is None or self.kinds[owner] is not None:  # outside the model, or inside ReLU & co.
            return result
        owner = owner or "forward"  # the model's own forward: no module can be named so
        if self.picks(owner):
            name, kind = FUNCTIONS[func]
            self.kinds[f"{owner}/{name}"] = kind
            self.record(f"{owner}/{name}", kind, result)
        return result

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.remove()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.remove()
        if self.step is not None and self.watched:
            self.functions = any("/" in name for name, *_ in self.calls)
        if self.step is None or not self.calls:
            return
        values = iter(torch.stack([t for *_, stats in self.calls for t in stats]).tolist())  # one transfer
        by_module: dict[str, list] = {}
        for name, numel, units, stats in self.calls:
            by_module.setdefault(name, []).append((numel, units, [next(values) for _ in stats]))
        metrics = {}
        for name, calls in by_module.items():
            metrics.update(summarize(name, self.kinds[name], calls))
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
        self.handles, self.running = [], []
        self.stop()

    def stop(self) -> None:
        """The activation functions' calls are no longer read."""
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
