"""harness: tells you whether a training harness is sound before you spend a GPU-day.

Folders are layers, lowest first; a module imports only from its own line and those before it (tests/project/test_layout.py
holds it, docs/layout.md draws it):

    errors.py, seeding.py, ranks.py, signals.py, compat.py   what every process shares
    config/    the schema, building a node, Hydra's errors explained, the config tree
    report/    verdict.json, symptoms, the sweep summary, the pages and plots
    data/      tokenizers, datasets, shards, batches;   ops/   the operations written twice
    models/    the built-in models;   train/   the LightningModule, Trainer, loggers, checkpoints, sharding
    checks/    the preflight;   probes/   what the network does while it learns, the symptom detectors
    tasks/     training, evaluation, the doctor; the config's rules and its targets' check
    cli/       the command line: train.py's and eval.py's entry

`harness.tasks.training.run(cfg)` is the whole training pipeline for a composed config.
"""

from __future__ import annotations

import importlib


def exported(exports: dict[str, tuple[str, ...]]):
    """A package's `__getattr__` importing each name of `exports` (module -> the names it defines) when first asked
    for, so the package imports nothing heavy until then."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"no attribute {name!r}; the package exports {', '.join(sorted(home))}")
        return getattr(importlib.import_module(home[name]), name)

    return __getattr__
