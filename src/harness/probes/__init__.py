"""Probes: callbacks logging what the network does while it learns (practice P1), each a `probes` entry.

probe.py        Probe, RunInfo;   probeset.py   the probes as one callback
assemble.py     the `probes` node built;   sink.py   a step's scalars as one row
trackers.py     histograms, images, tables;   figures.py   the run's figures
wandb_watch.py  wandb.watch, on request
layers/         weights, gradients, outputs;   tokens/   examples, logits, embeddings
detectors/      the symptom detectors"""

from harness.probes.assemble import build_probes, from_config
from harness.probes.probe import Probe, RunInfo
from harness.probes.probeset import ProbeSet

__all__ = ["Probe", "ProbeSet", "RunInfo", "build_probes", "from_config"]
