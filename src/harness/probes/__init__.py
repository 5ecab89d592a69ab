"""Probes: Lightning callbacks that log what the network does while it learns (practice P1).

Each probe is an entry of the `probes` config (conf/probes/default.yaml): a `_target_` and its arguments, its
period `every` among them. Overfit mode turns every probe on; mode=full those marked `full: true`;
`probes=off` none. A probe logs through whichever loggers are active and never syncs the host on a step
where it logs nothing. See docs/contracts.md, Probe; a fork's own: docs/extending.md (e).

    probe.py        Probe (the base class: every, due, sink, run) and RunInfo (what a probe knows of the run)
    probeset.py     all Probes as the one callback the builder returns (Lightning's per-callback cost, once)
    assemble.py     from_config: the `probes` node -> that callback (+ any plain callbacks), one generic loop
    sink.py         the metric sink: a step's scalars as one row to every logger, the symptoms reported
    trackers.py     what goes to the trackers besides rows: histograms, images, tables
    norms.py        grad_norm/, weight_norm/, update_ratio/ per parameter (ParameterNorms)
    dead.py         the dead-gradient sentinel (DeadGradients: verdict.json dead_params)
    histograms.py   grad_hist/, weight_hist/ (TensorBoard, wandb); grad_stats/, weight_stats/ (every logger)
    logits.py       logit/p_correct, logit/entropy, logit/top1 (+ per example and p_correct.png in overfit mode)
    datapoints.py   decoded examples and predictions: datapoints.jsonl, wandb Table, TensorBoard text
    embeddings.py   PCA of the token embeddings: image, embeddings.png
    by_position.py  input gradient by position: grad_by_position.png, verdict.json (reach.py measures it)
    reseed.py       hashes proving every overfit step saw the same inputs: verdict.json inputs_identical
    activations.py  every module's output: act/<module>/rms, mean, zero_frac, dead_frac, saturated (Activations)
    detectors/      the symptom detectors reading all of the above: verdict.json symptoms, console, every logger
    agreement.py    on several ranks, a checksum of the weights compared across them: ranks_diverged
    watch.py        wandb.watch, on request
    figures.py      the run's figures (matplotlib, imported only when one is drawn)

Nothing outside this folder imports it (bar its own benchmark, benchmarks.probes): delete it and
conf/probes/, and train.py runs without probes."""

from harness.probes.assemble import build_probes, from_config
from harness.probes.probe import Probe, RunInfo
from harness.probes.probeset import ProbeSet

__all__ = ["Probe", "ProbeSet", "RunInfo", "build_probes", "from_config"]
