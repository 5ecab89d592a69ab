"""Probes: Lightning callbacks that log what the network does while it learns (practice P1).

Each is an entry of the `probes` config (conf/probes/default.yaml): a `_target_` and its arguments, its period
`every` among them. A probe logs through every active logger; docs/contracts.md, Probe, says what it may cost.

    probe.py        Probe (the base class) and RunInfo;   probeset.py   every Probe as one callback
    assemble.py     from_config: the `probes` node -> that callback
    sink.py         a step's scalars as one row to every logger;   trackers.py   histograms, images, tables
    figures.py      the run's figures;   wandb_watch.py   wandb.watch, on request
    layers/         every layer's weights, gradients and outputs
    tokens/         the examples decoded, the mass on the right token, embeddings, gradient by position
    detectors/      the symptom detectors reading all of the above

Nothing outside this folder imports it: delete it and conf/probes/, and train.py runs without probes."""

from harness.probes.assemble import build_probes, from_config
from harness.probes.probe import Probe, RunInfo
from harness.probes.probeset import ProbeSet

__all__ = ["Probe", "ProbeSet", "RunInfo", "build_probes", "from_config"]
