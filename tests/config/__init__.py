"""The config (conf/, harness.config): every option composes and validates; the Lightning + Hydra composition."""
