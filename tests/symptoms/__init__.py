"""Symptoms a run shows (harness.probes.detectors, harness.report.symptoms): found where planted, reported,
read from the activations probe, and silent on healthy runs."""
