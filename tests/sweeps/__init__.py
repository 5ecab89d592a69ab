"""Sweeps: the presets, the launchers end to end, the summary of a sweep, Optuna's search."""
