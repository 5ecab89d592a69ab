"""What the detectors share: their thresholds (Limits), how far back their running medians look, and how many
readings in a row each place has been past its threshold."""

from __future__ import annotations

from dataclasses import dataclass, fields

from harness.probes.probe import whole

#: the running medians the loss and gradient rules compare against: this many latest values
RUNNING = 20


class Streaks:
    """How many readings in a row each place has been past its threshold."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def update(self, where: str, past: bool) -> int:
        self.counts[where] = self.counts.get(where, 0) + 1 if past else 0
        return self.counts[where]


@dataclass
class Limits:
    """Every threshold and window of the detectors: the Symptoms probe's keyword arguments, each a commented key of
    conf/probes/default.yaml (the package's docstring says which rule reads which)."""

    window: int = 100
    patience: int = 3
    layer_ratio: float = 1e-3
    reach: float = 0.0
    explode_jump: float = 100.0
    explode_growth: float = 100.0
    explode_norm: float = 1000.0
    dead_fraction: float = 0.9
    dead_units: float = 0.25
    saturated_fraction: float = 0.6
    saturated_late: float = 0.9
    spike_factor: float = 2.0
    spike_min: float = 0.1
    spikes: int = 2
    spike_stay: int = 8
    spike_sigmas: float = 6.0
    progress: float = 0.05
    ratio_high: float = 1.0
    ratio_low: float = 1e-6

    def __post_init__(self):
        whole("window", self.window, 2, "steps the loss rules look back over (try 100)")
        whole("patience", self.patience, 1, "readings in a row before a symptom (try 3)")
        whole("spikes", self.spikes, 1, "spikes within the window that make a symptom (try 2)")
        whole("spike_stay", self.spike_stay, 1, "steps in a row a spike lasts to be one (try 8)")


def names(kind) -> str:
    """The fields of a dataclass, as a list in words."""
    return ", ".join(f.name for f in fields(kind))
