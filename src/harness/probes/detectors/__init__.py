"""The symptom detectors: the `Symptoms` probe (symptoms_probe.py) reads the probes' stream (every row the sink logs: gradient norms, update
ratios, activations, gradient reach) and the training loss, and reports what a person would otherwise have to
spot in the charts (harness.report.symptoms: the record, the names, the suggestions).

    vanishing_gradients    the first block's gradient RMS a tiny fraction of the last block's, `patience`
                           readings in a row; or the input-gradient reach (grad_by_position) at the end of
                           training at or below `reach`
    exploding_gradients    the total gradient norm `explode_jump` times its running median, its recent
                           median `explode_growth` times its first, or above `explode_norm` `patience` steps
                           in a row; or the first block's gradient RMS 1/`layer_ratio` times the last's
    dead_units             a ReLU-like module's outputs exactly zero for >= `dead_fraction` (0.9) of them, or
                           >= `dead_units` (0.25) of its units dead (zero at every position of the batch)
    saturated_activations  a tanh/sigmoid-like module's outputs saturated for >= `saturated_fraction` (0.6) from
                           its first reading on, or >= `saturated_late` (0.9) once training saturated them
                           (both also for an activation called as a function: `<module>/<function>`)
    loss_spike             the loss `spike_factor` times its running median (and `spike_min` x the initial loss
                           above it, and `spike_sigmas` robust deviations) for `spike_stay` steps in a row,
                           or `spikes` times within `window`
    no_progress            after `window` steps at a learning rate >= a tenth of its base, the loss within
                           `progress` of where it started
    update_ratio           a weight matrix's ‖Δw‖/‖w‖ above `ratio_high` or (the loss still above half its
                           start) below `ratio_low`, `patience` readings in a row

The loss is kept on the device every step and read every `every` steps, in one transfer; the rest is read from
rows other probes already brought to the host, so this probe adds no sync of its own in between. Each symptom is
reported once per name and place (the sink: console, `symptoms/<name>` on every logger, a table for the
trackers, verdict.json `symptoms`).

The activations' thresholds are set where a person reading the histograms sees a problem, above what healthy
runs trained past memorization reach (36 runs: the built-ins, HF GPT-2 and Llama with GELU, SiLU and ReLU,
minGPT-style and x-transformers, dropout 0 and 0.2, synthetic and text): a ReLU MLP zeroes up to 0.78 of its
outputs and 0.10 of its units, a tanh RNN memorizing text saturates up to 0.48 of its, and learns its way to
0.6-0.73 in mode=full (from 0.1% at init: saturation training made, judged against `saturated_late`).

    symptoms_probe.py   the Symptoms probe: every detector fed from the sink's rows and the loss
    detector.py         what the detectors share: thresholds (Limits), running medians, readings in a row
    gradient_health.py  exploding_gradients, vanishing_gradients, update_ratio
    dead_saturated.py   dead_units, saturated_activations;   loss_curve.py   loss_spike, no_progress"""

from harness.probes.detectors.gradient_health import blocks_of
from harness.probes.detectors.symptoms_probe import Symptoms

__all__ = ["Symptoms", "blocks_of"]
