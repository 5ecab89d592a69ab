"""RANGES and held_out_fraction: the data keys' ranges, checked at the door (harness.tasks.validate). What
only the data can tell is checked where it is read. Imports nothing but the error type."""

from __future__ import annotations

from harness.errors import ConfigError

#: data keys with a range: key -> (smallest, whole number?, why). Checked wherever the key is set.
RANGES = {
    "data.batch_size": (1, True, "examples a batch (try data.batch_size=32)"),
    "data.size": (1, True, "training examples (try data.size=1000)"),
    "data.val_size": (1, True, "validation examples (try data.val_size=100)"),
    "data.num_workers": (0, True, "DataLoader worker processes, 0: none (try data.num_workers=0)"),
}


def held_out_fraction(val_fraction: float) -> float:
    """`data.val_fraction`, the share of a corpus held out for validation, if it lies strictly in (0, 1)."""
    if not 0 < val_fraction < 1:
        raise ConfigError("data.val_fraction", val_fraction, "must lie strictly between 0 and 1 (try 0.1)")
    return val_fraction
