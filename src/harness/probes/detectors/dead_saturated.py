"""The activations' rules, `ActivationRules`: `dead_units` (ReLU-like outputs zero, units dead) and
`saturated_activations` (tanh/sigmoid-like at their limits), from the activations probe's rows."""

from __future__ import annotations

import math

# Thresholds sit above what 36 healthy runs reached (built-ins, HF GPT-2 and Llama, minGPT, x-transformers): a ReLU
# MLP zeroes up to 0.78 of its outputs and 0.10 of its units; a tanh RNN saturates up to 0.48 when memorizing,
# and learns its way to 0.6-0.73 in mode=full: from its first reading, saturation above `saturated_fraction` is an
# init or input scale far too large; learned, only above `saturated_late`.

#: an activations statistic -> the symptom it shows, the threshold's argument, what it counts
ACTIVATION_LIMITS = {
    "zero_frac": ("dead_units", "dead_fraction", "of its outputs exactly zero"),
    "dead_frac": ("dead_units", "dead_units", "of its units dead (zero at every position)"),
    "saturated": ("saturated_activations", "saturated_fraction", "of its outputs saturated"),
}


class ActivationRules:
    """Mixed into the Symptoms probe: reads `activation_keys` and the thresholds, reports through it."""

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
                detail = (
                    f"{_function_call_prefix(module)}{value:.1%} {what} for {self.patience} readings in a row"
                )
                self.report(name, step, module, value, detail, side=module)


def _function_call_prefix(where: str) -> str:
    """The prefix a function's reading gets in a detail ('mlp/tanh': tanh called in mlp's forward); '' for a
    module."""
    module, _, function = where.partition("/")
    if not function:
        return ""
    owner = "the model's own forward" if module == "forward" else f"the forward of {module}"
    return f"{function} called as a function in {owner}: "
