"""RANGES: the built-in models' keys' ranges, checked at the door (harness.tasks.validate); the other
arguments are checked by each class when built."""

from __future__ import annotations

#: model keys with a range: key -> (smallest, whole number?, why). Checked wherever the key is set.
RANGES = {
    "model.d_model": (1, True, "the model's width (try model.d_model=64)"),
    "model.layers": (1, True, "blocks or recurrent layers (try model.layers=2)"),
    "model.heads": (1, True, "attention heads (try model.heads=4)"),
    "model.max_len": (1, True, "positions the model can embed (try model.max_len=${data.length})"),
}
