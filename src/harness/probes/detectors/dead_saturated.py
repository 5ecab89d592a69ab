"""The activations' rules: `dead_units` (a ReLU-like module's outputs zero, or units dead at every position) and
`saturated_activations` (a tanh/sigmoid-like module at its limits), read from the activations probe's rows: of
activation modules, and of activation functions called in a module's forward (`<module>/<function>`).

Saturation is judged by where it comes from. A module saturated from its first reading on (`saturated_fraction`,
0.6) has an init or an input scale far too large: its gradient is gone before anything is learned. One that
training saturated (a tanh RNN learns its way to 0.6-0.73 of its outputs beyond 0.97, and trains well) is a
problem only far past that (`saturated_late`, 0.9)."""

from __future__ import annotations

import math

#: an activations statistic -> the symptom it shows, the threshold's argument, what it counts
ACTIVATION_LIMITS = {
    "zero_frac": ("dead_units", "dead_fraction", "of its outputs exactly zero"),
    "dead_frac": ("dead_units", "dead_units", "of its units dead (zero at every position)"),
    "saturated": ("saturated_activations", "saturated_fraction", "of its outputs saturated"),
}


class ActivationRules:
    """Mixed into the Symptoms probe: reads `activation_keys`, the thresholds, and reports through it."""

    def check_activations(self, step: int, row: dict) -> None:
        """Each watched module's zero, dead-unit and saturated fractions against their limits."""
        if self.activation_keys is None and any(k.startswith("act/") for k in row):
            # the activations probe logs the same keys at every reading: found once
            self.activation_keys = [(k, *k[4:].rsplit("/", 1)) for k in row if k.startswith("act/")]
            self.activation_keys = [entry for entry in self.activation_keys if entry[2] in ACTIVATION_LIMITS]
        for key, module, stat in self.activation_keys or []:
            value = row.get(key)
            if value is None or not math.isfinite(value):
                continue
            name, limit, what = ACTIVATION_LIMITS[stat]
            limit = getattr(self, limit)
            first = self.first_readings.setdefault(f"{stat}:{module}", value)
            if stat == "saturated" and first < limit:  # learned its way there: only far past it is a problem
                limit, what = self.saturated_late, f"{what} (from {first:.1%} at its first reading)"
            if self.streaks.update(f"{stat}:{module}", value >= limit) >= self.patience:
                detail = f"{called(module)}{value:.1%} {what} for {self.patience} readings in a row"
                self.report(name, step, module, value, detail, side=module)


def called(where: str) -> str:
    """What a reading's place means, where it is a function ('mlp/tanh': tanh called in mlp's forward)."""
    module, _, function = where.partition("/")
    if not function:
        return ""
    owner = "the model's own forward" if module == "forward" else f"the forward of {module}"
    return f"{function} called as a function in {owner}: "
