"""Probes of every layer: its weights, gradients and outputs.

norms.py        grad_norm/, weight_norm/, update_ratio/ per parameter (ParameterNorms)
dead.py         gradients that go to zero and stay there (DeadGradients: verdict.json dead_params)
histograms.py   grad_hist/, weight_hist/ for the trackers; grad_stats/, weight_stats/ for every logger
activations.py  every module's output: act/<module>/rms, mean, zero_frac, dead_frac, saturated
agreement.py    on several ranks, a checksum of the weights compared across them: ranks_diverged"""
