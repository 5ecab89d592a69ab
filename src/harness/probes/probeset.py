"""All probes as one Lightning callback.

Lightning calls every hook of every callback on every step, each call inside a profiler context and with
the callback's state key built: about 20 µs a callback a hook on a small CPU. Ten probes as ten callbacks
cost more than a millisecond a step that way, most of what the probes themselves cost on a tiny model. As
one callback, each hook is dispatched once, to the probes that define it, in order (the sink last)."""

from __future__ import annotations

import pytorch_lightning as pl

#: the hooks the probes define; any other hook stays Callback's no-op
HOOKS = (
    "on_fit_start",
    "on_train_start",
    "on_train_batch_start",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_end",
    "on_fit_end",
)


class ProbeSet(pl.Callback):
    """Runs `probes` (Lightning callbacks themselves, usable alone too) as one callback."""

    def __init__(self, probes: list[pl.Callback]):
        self.probes = probes
        self.calls = {
            hook: [
                getattr(p, hook) for p in probes if getattr(type(p), hook) is not getattr(pl.Callback, hook)
            ]
            for hook in HOOKS
        }

    def _run(self, hook: str, *args) -> None:
        for call in self.calls[hook]:
            call(*args)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._run("on_fit_start", trainer, pl_module)

    def on_train_start(self, trainer, pl_module) -> None:
        self._run("on_train_start", trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._run("on_train_batch_start", trainer, pl_module, batch, batch_idx)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._run("on_before_optimizer_step", trainer, pl_module, optimizer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._run("on_train_batch_end", trainer, pl_module, outputs, batch, batch_idx)

    def on_train_end(self, trainer, pl_module) -> None:
        self._run("on_train_end", trainer, pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._run("on_fit_end", trainer, pl_module)

    def verdict_items(self) -> dict:
        """Every probe's verdict items (dead_params, grad_by_position, reach_*, inputs_identical), merged."""
        items: dict = {}
        for probe in self.probes:
            items.update(probe.verdict_items() if hasattr(probe, "verdict_items") else {})
        return items
