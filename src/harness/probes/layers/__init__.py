"""Probes of every layer.

norms.py   grad_norm/, weight_norm/, update_ratio/;   dead.py   dead_params
histograms.py   grad_hist/, weight_hist/, grad_stats/, weight_stats/
activations.py  act/<module>/;   agreement.py   ranks_diverged"""
