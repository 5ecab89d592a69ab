"""harness: tells you whether a training harness is sound before you spend a GPU-day.

The package's folders follow the pipeline: cli/ (the command line) -> config/ (schema, rules, one-line errors)
-> data/ -> models/ and ops/ (the written-twice operations, the loss) -> checks/ (the preflight) -> train/ (the
run, the regimes, checkpoints and signals) -> probes/ -> report/ (verdicts, summaries, plots, eval, the doctor).
`harness.train.run.run(cfg)` is the whole training pipeline; `train.py` hands it a composed Hydra config.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: module names of earlier layouts -> the module that holds their contents now: an import of the old name gets
#: the new module (docs/layout.md lists them; the new names are the current ones)
RENAMED = {
    "harness.run": "harness.train.run",
    "harness.module": "harness.train.module",
    "harness.optim": "harness.train.optim",
    "harness.overfit": "harness.train.overfit",
    "harness.loggers": "harness.train.loggers",
    "harness.profiling": "harness.train.profiling",
    "harness.signals": "harness.train.signals",
    "harness.distributed": "harness.train.devices",
    "harness.faults": "harness.train.checkpoints",
    "harness.modes": "harness.train.full",
    "harness.door": "harness.cli.door",
    "harness.tree": "harness.config.tree",
    "harness.twins": "harness.ops",
    "harness.schema": "harness.config.schema",
    "harness.verdict": "harness.report.verdict",
    "harness.symptoms": "harness.report.symptoms",
    "harness.evaluate": "harness.report.evaluate",
    "harness.doctor": "harness.report.doctor",
    "harness.plots": "harness.report.plots",
    "harness.search": "harness.report.search",
    "harness.probes.symptoms": "harness.probes.detectors",
}


class _Renamed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds each old name of RENAMED and hands over the module it now names."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in RENAMED else None

    def create_module(self, spec):
        return importlib.import_module(RENAMED[spec.name])

    def exec_module(self, module) -> None:
        """The new module is already executed."""


def exported(exports: dict[str, tuple[str, ...]]):
    """A package's `__getattr__` that imports each name of `exports` (a module -> the names it defines) when first
    asked for: the package imports nothing heavy until then (the door reads rules without torch)."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"no attribute {name!r}; the package exports {', '.join(sorted(home))}")
        return getattr(importlib.import_module(home[name]), name)

    return __getattr__


def _install_renames() -> None:
    """Idempotent: one finder however often the package is imported (a reload, a test's fresh import)."""
    if not any(type(finder).__name__ == _Renamed.__name__ for finder in sys.meta_path):
        sys.meta_path.append(_Renamed())


def _start() -> None:
    """Register the config schema (before any compose: conf/train.yaml's defaults start from it), and the renames."""
    from harness.config.schema import register

    register()
    _install_renames()


_start()
