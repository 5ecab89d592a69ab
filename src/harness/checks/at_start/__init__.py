"""The preflight rows read as training starts, in the running Trainer, every rank in step.

start_checks.py      StartChecks: the callback that runs the rows below and stops every rank on a FAIL
precision.py         precision: one forward and the loss in the precision the Trainer set up
rank_data.py         rank_data: every rank reads its own share of the data
after_sharding.py    the model checks of a model built on the meta device, run once it is sharded"""
