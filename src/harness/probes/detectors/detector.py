"""What the detectors share: their thresholds (`Limits`), how far back running medians look (RUNNING), and
readings in a row past a threshold (`Streaks`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from harness.config.groups.probes import ABOVE_ZERO, SymptomsKeys, check_above_zero
from harness.probes.probe import checked_declared

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
    """Every threshold and window of the detectors: the Symptoms probe's keyword arguments (declared, with
    their ranges, in harness.config.groups.probes: `SymptomsKeys`)."""

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
    diverge_rise: float = 0.5
    diverge_stay: int = 20
    progress: float = 0.05
    ratio_high: float = 1.0
    ratio_low: float = 1e-6

    def __post_init__(self):
        for name in ("window", "patience", "spikes", "spike_stay", "diverge_stay"):
            checked_declared(SymptomsKeys, name, getattr(self, name))
        for name in ABOVE_ZERO:
            check_above_zero(name, getattr(self, name))


def field_names_text(kind) -> str:
    """The fields of a dataclass, as a list in words."""
    return ", ".join(f.name for f in fields(kind))
