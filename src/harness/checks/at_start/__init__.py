"""The preflight rows read as training starts, in the running Trainer, every rank in step.

start_checks.py      StartChecks: runs them, stops every rank on a FAIL precision.py         precision: the
precision the Trainer set up is the one used rank_data.py         rank_data: every rank reads its own share
after_sharding.py    the model checks of a model built on the meta device"""
