"""The symptom detectors: the Symptoms probe reads the sink's rows and the loss and reports what a person
would spot in the charts; thresholds: harness.config.groups.probes.

    symptoms_probe.py   Symptoms;   detector.py   Limits, Streaks
    gradient_health.py  exploding_gradients, vanishing_gradients, update_ratio
    dead_saturated.py   dead_units, saturated_activations
    loss_curve.py       loss_spike, no_progress"""

from harness.probes.detectors.gradient_health import blocks_of
from harness.probes.detectors.symptoms_probe import Symptoms

__all__ = ["Symptoms", "blocks_of"]
