"""What the detectors share: how far back their running medians look, and how many readings in a row each place
has been past its threshold."""

from __future__ import annotations

#: the running medians the loss and gradient rules compare against: this many latest values
RUNNING = 20


class Streaks:
    """How many readings in a row each place has been past its threshold."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def update(self, where: str, past: bool) -> int:
        self.counts[where] = self.counts.get(where, 0) + 1 if past else 0
        return self.counts[where]
