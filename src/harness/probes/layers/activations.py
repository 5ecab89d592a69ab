"""Every module's training-forward output, `Activations`: act/<module>/rms, mean, and by kind (`kind_of`)
zero_frac, dead_frac or saturated; also for activation functions a forward calls (`act/<module>/<function>/`)."""

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

# Hooks and the function-call mode live from a logging step's start to its backward only: the training forward,
# not the probes' own (this entry comes after theirs in harness.config.groups.probes). One transfer at the step's end;
# no float32 copy of an output (a bf16 logits tensor is a step's largest): float32 accumulators, one bool tensor.

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
    """'relu', 'tanh', 'sigmoid' or None: `module`'s kind, by class name (a module holding others is none)."""
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
    """Whether `module`'s forward may call an activation function: any but torch's own childless layers."""
    builtin_leaf = type(module).__module__.startswith("torch.nn.") and next(module.children(), None) is None
    return kind is not None or not builtin_leaf


def _output_stats(output: torch.Tensor, kind: str | None) -> list[torch.Tensor]:
    """0-dim tensors, no sync: the output's norm and sum, then its kind's counts (zeros and live units, or
    saturated)."""
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


def _module_metrics(
    name: str, kind: str | None, calls: list[tuple[int, int, list[float]]]
) -> dict[str, float]:
    """One module's metrics from its calls' (outputs, units, stats): RMS, mean and its kind's fractions."""
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
    """Every `every` steps: `act/<module>/rms`, `mean`, and `zero_frac`, `dead_frac` (ReLU-like) or
    `saturated` (tanh-, sigmoid-like) of the modules `include` / `exclude` pick and of the functions their
    forwards call."""

    def __init__(
        self, every: int | None = 50, include: list[str] | None = None, exclude: list[str] | None = None
    ):
        super().__init__(every)
        # several calls in one forward: the mean; with gradient accumulation, the step's first micro-batch
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
                m.register_forward_pre_hook(self.pre_hook(n))
                for n, m, _, calls in self.modules
                if watch and calls
            ]
            self.handles += [
                m.register_forward_hook(self.post_hook(n, picked, watch and calls), always_call=True)
                for n, m, picked, calls in self.modules
                if picked or (watch and calls)
            ]
            self.watched = watch

    def pre_hook(self, name: str):
        """A forward pre-hook: module `name`'s forward is running (the model's starts the function mode)."""

        def hook(module, args) -> None:
            self.running.append(name)
            if not name and self.mode is None:  # the model's forward starts: the functions' calls are read
                self.mode = Intercept(dict.fromkeys(FUNCTIONS, self.on_function_call)).__enter__()

        return hook

    def post_hook(self, name: str, picked: bool, calls: bool):
        """A forward hook: module `name`'s forward ended; its output recorded where `picked`."""
        kind = self.kinds[name]

        def hook(module, inputs, output) -> None:
            if calls and self.running:
                self.running.pop()
            if not name:
                self.stop_intercepting()
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

    def on_function_call(self, func, args, kwargs):
        """An activation function's call (an Intercept handler), read as `<module>/<function>` of a watched
        module."""
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
        self.remove_hooks()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.remove_hooks()
        if self.step is not None and self.watched:
            self.functions = any("/" in name for name, *_ in self.calls)
        if self.step is None or not self.calls:
            return
        stacked = torch.stack(
            [t for *_, stats in self.calls for t in stats]
        )  # read with the step's other values
        step, calls = self.step, self.calls
        self.sink.defer(step, {"stats": stacked}, lambda read: self._read(step, calls, read["stats"]))
        self.calls, self.step = [], None

    def _read(self, step: int, calls: list, stats: list[float]) -> None:
        values = iter(stats)
        by_module: dict[str, list] = {}
        for name, numel, units, stats in calls:
            by_module.setdefault(name, []).append((numel, units, [next(values) for _ in stats]))
        metrics = {}
        for name, module_calls in by_module.items():
            metrics.update(_module_metrics(name, self.kinds[name], module_calls))
        self.sink.add(step, metrics)

    def on_train_end(self, trainer, pl_module) -> None:
        self.remove_hooks()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.remove_hooks()  # a forward that raised leaves no hook behind
        self.calls, self.step = [], None

    def remove_hooks(self) -> None:
        """Every hook off, and the function mode."""
        for handle in self.handles:
            handle.remove()
        self.handles, self.running = [], []
        self.stop_intercepting()

    def stop_intercepting(self) -> None:
        """The activation functions' calls are no longer read."""
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
