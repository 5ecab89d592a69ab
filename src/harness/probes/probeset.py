"""All probes as one Lightning callback, `ProbeSet`: each hook dispatched once to the probes defining it, the
sink last; a probe overriding a non-hook method (`state_dict`) is refused by name."""

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
    """Whether `callback` has its own `name` (from its class or set on the instance) rather than
    pl.Callback's."""
    own = name in vars(callback)
    return own or inspect.getattr_static(type(callback), name) is not inspect.getattr_static(
        pl.Callback, name
    )


def undispatchable_overrides(callback: pl.Callback) -> list[str]:
    """The public pl.Callback members `callback` overrides that a ProbeSet cannot call for it."""
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


# Lightning calls every hook of every callback each step (~20 µs a callback a hook): ten probes as one callback
# save most of what the probes cost a tiny model
class ProbeSet(pl.Callback):
    """Runs `probes` as one callback, the sink last; each Probe bound to that sink and to `run`."""

    def __init__(self, probes: list[pl.Callback], run: RunInfo | None = None):
        for probe in probes:
            if refused := undispatchable_overrides(probe):
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
        """Every probe's verdict items, merged."""
        items: dict = {}
        for probe in self.probes:
            items.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
        return items
