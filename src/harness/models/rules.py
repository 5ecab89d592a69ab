"""The rules of the built-in models' keys, checked at the door (harness.tasks.validate runs them): ranges a type
cannot say. A model's other arguments are checked by its class when it is built. Imports nothing heavy."""

from __future__ import annotations

#: model keys with a range: key -> (smallest, whole number?, why). Checked wherever the key is set.
RANGES = {
    "model.d_model": (1, True, "the model's width (try model.d_model=64)"),
    "model.layers": (1, True, "blocks or recurrent layers (try model.layers=2)"),
    "model.heads": (1, True, "attention heads (try model.heads=4)"),
    "model.max_len": (1, True, "positions the model can embed (try model.max_len=${data.length})"),
}
