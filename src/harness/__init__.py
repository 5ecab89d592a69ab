"""harness: tells you whether a training harness is sound before you spend a GPU-day.

Folders are layers, lowest first; a module imports only from its own line and those before it (tests/project/test_layout.py
holds it, docs/layout.md draws it):

    errors.py, seeding.py, ranks.py, signals.py, compat.py   what every process shares
    config/    the schema, building a node, Hydra's errors explained, the config tree
    report/    verdict.json, symptoms, the sweep summary, the pages and plots
    data/      tokenizers, datasets, shards, batches;   ops/   the operations written twice
    models/    the built-in models;   train/   the LightningModule, Trainer, loggers, checkpoints, sharding
    checks/    the preflight;   probes/   what the network does while it learns, the symptom detectors
    tasks/     training, evaluation, the doctor; the config's rules and trial build
    cli/       the command line: train.py's and eval.py's entry

`harness.tasks.training.run(cfg)` is the whole training pipeline for a composed config. Modules of the previous
layout still import under their earlier names (EARLIER_NAMES), with a DeprecationWarning naming the new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: module names of the previous layout -> where each module lives now (docs/layout.md, Names of earlier layouts)
EARLIER_NAMES = {
    "harness.checks.data_reads": "harness.checks.data.reads",
    "harness.checks.batch_format": "harness.checks.data.batch_format",
    "harness.checks.mask": "harness.checks.data.loss_mask",
    "harness.checks.roundtrip": "harness.checks.data.roundtrip",
    "harness.checks.diagnose": "harness.checks.data.roundtrip_causes",
    "harness.checks.special_tokens": "harness.checks.data.special_tokens",
    "harness.checks.splits": "harness.checks.data.split_overlap",
    "harness.checks.loaders": "harness.checks.data.loaders",
    "harness.checks.gradients": "harness.checks.model.gradients",
    "harness.checks.behaviour": "harness.checks.model.at_init",
    "harness.checks.leaks": "harness.checks.model.dependence",
    "harness.checks.trace": "harness.checks.model.first_break",
    "harness.checks.documents": "harness.checks.model.document_isolation",
    "harness.checks.watched_forward": "harness.checks.model.watched_forward",
    "harness.checks.architecture": "harness.checks.model.architecture",
    "harness.checks.score_scale": "harness.checks.model.score_scale",
    "harness.checks.started": "harness.checks.at_start.start_checks",
    "harness.checks.precision": "harness.checks.at_start.precision",
    "harness.checks.rank_data": "harness.checks.at_start.rank_data",
    "harness.checks.sharded": "harness.checks.at_start.after_sharding",
    "harness.train.heartbeat": "harness.train.distributed.heartbeat",
    "harness.train.watchdog": "harness.train.distributed.watchdog",
    "harness.train.sharding": "harness.train.distributed.sharding",
    "harness.train.whole": "harness.train.distributed.shard_sums",
    "harness.train.devices": "harness.train.distributed.devices",
    "harness.tasks.lost": "harness.tasks.rank_lost",
    "harness.probes.watch": "harness.probes.wandb_watch",
    "harness.probes.norms": "harness.probes.layers.norms",
    "harness.probes.dead": "harness.probes.layers.dead",
    "harness.probes.histograms": "harness.probes.layers.histograms",
    "harness.probes.activations": "harness.probes.layers.activations",
    "harness.probes.agreement": "harness.probes.layers.agreement",
    "harness.probes.datapoints": "harness.probes.tokens.datapoints",
    "harness.probes.logits": "harness.probes.tokens.logits",
    "harness.probes.embeddings": "harness.probes.tokens.embeddings",
    "harness.probes.by_position": "harness.probes.tokens.by_position",
    "harness.probes.reach": "harness.probes.tokens.reach",
    "harness.probes.reseed": "harness.probes.tokens.reseed",
    "harness.data.synthetic": "harness.data.sources.synthetic",
    "harness.data.text": "harness.data.sources.text",
    "harness.data.folder": "harness.data.sources.folder",
    "harness.data.corpus": "harness.data.sources.corpus",
    "harness.cli.prepare_command": "harness.cli.prepare",
    "harness.data.windows": "harness.data.sources.windows",
}


def exported(exports: dict[str, tuple[str, ...]]):
    """A package's `__getattr__` importing each name of `exports` (module -> the names it defines) when first asked
    for, so the package imports nothing heavy until then."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"no attribute {name!r}; the package exports {', '.join(sorted(home))}")
        return getattr(importlib.import_module(home[name]), name)

    return __getattr__


class _EarlierNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module of EARLIER_NAMES as the module it became: `import harness.train.whole`, and a config's
    `_target_: harness.train.sharding.FSDP`, keep working for forks written against the previous layout."""

    def find_spec(self, fullname, path, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in EARLIER_NAMES else None

    def create_module(self, spec):
        current = EARLIER_NAMES[spec.name]
        warnings.warn(f"{spec.name} is now {current}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(current)

    def exec_module(self, module) -> None:  # the module it became is already executed
        pass


if not any(
    isinstance(finder, _EarlierNames) for finder in sys.meta_path
):  # asked only after every real module
    sys.meta_path.append(_EarlierNames())
