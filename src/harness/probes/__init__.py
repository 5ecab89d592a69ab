"""Probes: Lightning callbacks that log what the network does while it learns (practice P1).

Each probe is a Callback configured under `probes` (conf/probes/) with its frequency. Overfit mode turns every
probe on; mode=full those marked `full: true`; `probes=off` none. A probe logs through whichever loggers are
active and never syncs the host on a step where it logs nothing. See docs/contracts.md, Probe.

    gradients.py    grad_norm/, weight_norm/, update_ratio/ per parameter; the dead-gradient sentinel
    histograms.py   grad_hist/, weight_hist/ (TensorBoard, wandb); grad_stats/, weight_stats/ (every logger)
    logits.py       logit/p_correct, logit/entropy, logit/top1 (+ per example and p_correct.png in overfit mode)
    datapoints.py   decoded examples and predictions: datapoints.jsonl, wandb Table, TensorBoard text
    embeddings.py   PCA of the token embeddings: image, embeddings.png
    by_position.py  input gradient by position: grad_by_position.png, verdict.json
    reseed.py       hashes proving every overfit step saw the same inputs: verdict.json inputs_identical
    watch.py        wandb.watch, on request
    probeset.py     all of them as the one callback build_probes returns (Lightning's per-callback cost, once)"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from harness.config import build, whole_number
from harness.errors import ConfigError
from harness.probes.by_position import GradByPosition
from harness.probes.datapoints import Datapoints
from harness.probes.embeddings import Embeddings
from harness.probes.emit import MetricSink
from harness.probes.gradients import LayerNorms
from harness.probes.histograms import Histograms
from harness.probes.logits import LogitMass
from harness.probes.probeset import ProbeSet
from harness.probes.reseed import ReseedProof
from harness.probes.watch import WandbWatch

#: every probe's section of conf/probes/default.yaml
PROBES = ("layers", "dead", "histograms", "logits", "datapoints", "embeddings", "grad_by_position")


def _whole(cfg: DictConfig, key: str, minimum: int, hint: str) -> int:
    return whole_number(cfg, key, minimum, hint, root="probes")


def build_probes(cfg: DictConfig, run_dir: Path, data, overfit: bool) -> list[pl.Callback]:
    """The probes `cfg` (the `probes` config group) turns on for this run, then the sink that logs their
    scalars (it must come last), as one ProbeSet callback (cheaper than one callback a probe); [] when off.
    `data`: the set-up datamodule (tokenizer, train_dataset, val_dataset)."""
    if not cfg.enabled:
        return []
    on = {name: overfit or bool(cfg[name].full) for name in PROBES}
    every = {
        name: _whole(cfg, f"{name}.every", 1, "steps between two logs (try 10)")
        for name in PROBES
        if name != "dead"
    }
    sink = MetricSink()
    probes: list[pl.Callback] = []
    if on["layers"] or on["dead"]:
        patience = _whole(cfg, "dead.patience", 1, "steps in a row before a gradient counts as dead (try 10)")
        threshold = cfg.dead.threshold
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0
        ):
            raise ConfigError(
                "probes.dead.threshold", threshold, "must be a number >= 0, or null for the dtype's own"
            )
        ratio_every = _whole(cfg, "layers.ratio_every", 1, "steps between update ratios (try 10)")
        probes.append(
            LayerNorms(
                sink,
                every=every["layers"] if on["layers"] else None,
                patience=patience if on["dead"] else None,
                threshold=threshold,
                ratio_every=ratio_every,
            )
        )
    if on["histograms"]:
        bins = _whole(cfg, "histograms.bins", 1, "buckets per histogram (try 64)")
        probes.append(Histograms(sink, every["histograms"], bins))
    if on["logits"]:
        probes.append(
            LogitMass(sink, every["logits"], per_example=overfit, run_dir=run_dir, plots=bool(cfg.plots))
        )
    if on["datapoints"]:
        examples = _whole(cfg, "datapoints.examples", 1, "examples shown of each split (try 4)")
        text = getattr(getattr(data, "train_dataset", None), "task", None) == "lm"
        prompts = _whole(cfg, "datapoints.prompts", 0, "greedy continuations in mode=full on text (0: none)")
        tokens = _whole(cfg, "datapoints.tokens", 0, "characters each continuation adds (try 32)")
        generate_every = _whole(cfg, "datapoints.generate_every", 1, "steps between continuations (try 500)")
        probes.append(
            Datapoints(
                data,
                run_dir,
                every["datapoints"],
                examples,
                prompts=prompts if text and not overfit else 0,
                tokens=tokens,
                generate_every=generate_every,
            )
        )
    if on["embeddings"]:
        probes.append(Embeddings(sink, data.tokenizer, run_dir, every["embeddings"], plots=bool(cfg.plots)))
    if on["grad_by_position"]:
        examples = _whole(cfg, "grad_by_position.examples", 1, "training examples in the fixed batch (try 4)")
        probes.append(
            GradByPosition(sink, data, run_dir, every["grad_by_position"], examples, plots=bool(cfg.plots))
        )
    reseed_every = _whole(cfg, "reseed.every", 1, "steps between two hashes (try 1)")
    # always there: its verdict item, inputs_identical, is null in mode=full
    probes.append(ReseedProof(sink, reseed_every, active=overfit))
    if cfg.wandb_watch:
        probes.append(WandbWatch(log_what="all", log_freq=10))
    # a fork's own probes: each its own callback, so every Lightning hook reaches it
    return [
        ProbeSet([*probes, sink]),
        *(_extra(name, node) for name, node in (cfg.get("extra") or {}).items()),
    ]


def from_config(run_dir: Path, data, overfit: bool, **sections) -> list[pl.Callback]:
    """build_probes for the `probes` config node, which names this function as its `_target_`."""
    return build_probes(OmegaConf.create(sections), run_dir=run_dir, data=data, overfit=overfit)


def _extra(name: str, node: DictConfig) -> pl.Callback:
    """One of `probes.extra`, built by Hydra; a mistake in it is a one-line ConfigError."""
    key = f"probes.extra.{name}"
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(key, node, "give {_target_: package.module.YourCallback, ...its arguments}")
    probe = build(node, key)
    if not isinstance(probe, pl.Callback):
        raise ConfigError(key, node._target_, "is not a pytorch_lightning Callback; a probe must be one")
    return probe
