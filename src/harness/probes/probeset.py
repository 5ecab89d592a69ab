"""All probes as one Lightning callback.

Lightning calls every hook of every callback on every step, each call inside a profiler context and with
the callback's state key built: about 20 µs a callback a hook on a small CPU. Ten probes as ten callbacks
cost more than a millisecond a step that way, most of what the probes themselves cost on a tiny model. As
one callback, each hook is dispatched once, to the probes that define it, in order (the sink last).

Every Lightning hook called with (trainer, pl_module, ...) is dispatched, whichever a probe defines. A
method of Callback that is not such a hook (`state_dict`, `load_state_dict`: a callback's own checkpoint
state) cannot be shared by several probes, so a probe that overrides one is refused by name: no probe
method is ever silently left uncalled."""

from __future__ import annotations

import inspect

import pytorch_lightning as pl

from harness.probes.probe import Probe, RunInfo
from harness.probes.sink import MetricSink


def hooks() -> tuple[str, ...]:
    """The callback hooks of this Lightning version: every method of pl.Callback taking (trainer, pl_module)."""
    return tuple(
        name
        for name, method in vars(pl.Callback).items()
        if inspect.isfunction(method)
        and list(inspect.signature(method).parameters)[1:3] == ["trainer", "pl_module"]
    )


def overrides(callback: pl.Callback, name: str) -> bool:
    """Whether `callback` has its own `name`, rather than pl.Callback's: from its class, or set on the instance
    (as a ProbeSet sets its hooks: one may hold another)."""
    own = name in vars(callback)
    return own or inspect.getattr_static(type(callback), name) is not inspect.getattr_static(
        pl.Callback, name
    )


def undispatched(callback: pl.Callback) -> list[str]:
    """The public members of pl.Callback that `callback` overrides and a ProbeSet cannot call for it."""
    dispatched = set(hooks())
    return [
        name
        for name in vars(pl.Callback)
        if not name.startswith("_") and name not in dispatched and overrides(callback, name)
    ]


class Dispatch:
    """One hook of a ProbeSet: calls `calls` (the probes' own bound hooks) in order."""

    def __init__(self, calls: list):
        self.calls = calls

    def __call__(self, *args, **kwargs) -> None:
        for call in self.calls:
            call(*args, **kwargs)


class ProbeSet(pl.Callback):
    """Runs `probes` (Probe subclasses, or plain callbacks) as one callback, the sink that logs their
    scalars last. Each Probe is bound to that sink and to `run` (what it may know of the run)."""

    def __init__(self, probes: list[pl.Callback], run: RunInfo | None = None):
        for probe in probes:
            if refused := undispatched(probe):
                raise TypeError(
                    f"{type(probe).__name__} overrides {', '.join(refused)}, which a ProbeSet does not call "
                    f"(it runs every probe as one callback): make {type(probe).__name__} a plain "
                    "pl.Callback, run as a callback of its own (any entry of conf/probes that is not a Probe is)"
                )
        self.sink = MetricSink()
        self.probes = [*probes, self.sink]
        for probe in probes:
            if isinstance(probe, Probe):
                probe.bind(self.sink, run or RunInfo())
        for hook in hooks():
            calls = [getattr(probe, hook) for probe in self.probes if overrides(probe, hook)]
            if calls:  # the others stay Callback's no-op
                setattr(self, hook, calls[0] if len(calls) == 1 else Dispatch(calls))

    def verdict_items(self) -> dict:
        """Every probe's verdict items (dead_params, grad_by_position, reach_*, inputs_identical), merged."""
        items: dict = {}
        for probe in self.probes:
            items.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
        return items
