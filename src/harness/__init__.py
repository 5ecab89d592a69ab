"""harness: tells you whether a training harness is sound before you spend a GPU-day.

The package's folders are layers, listed lowest first: a module imports only from its own line and the lines
before it (tests/test_layout.py holds it, docs/layout.md draws it):

    errors.py, seeding.py, ranks.py, signals.py, compat.py   what every process shares
    config/    the schema, a node built with one-line errors, Hydra's errors explained, the config tree
    report/    the records: verdict.json and its exit codes, symptoms, the sweep summary and plots
    data/      tokenizers, datasets, corpora and their shards, batches;   ops/   the operations written twice
    models/    the built-in models;   train/   the LightningModule, Trainer, loggers, checkpoints, sharding
    checks/    the preflight;   probes/   what the network does while it learns, and the symptom detectors
    tasks/     training, evaluation and the doctor; what judges a whole config (its rules, its trial build)
    cli/       the command line: train.py's and eval.py's entry

`harness.tasks.training.run(cfg)` is the whole training pipeline for a composed config; `train.py` hands its
conf/ folder to harness.cli.main, which composes and validates every job's config, then runs it.
"""

from __future__ import annotations

import importlib


def exported(exports: dict[str, tuple[str, ...]]):
    """A package's `__getattr__` that imports each name of `exports` (a module -> the names it defines) when first
    asked for: the package imports nothing heavy until then (the command line reads rules without torch)."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"no attribute {name!r}; the package exports {', '.join(sorted(home))}")
        return getattr(importlib.import_module(home[name]), name)

    return __getattr__
