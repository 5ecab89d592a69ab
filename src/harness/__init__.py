"""harness: tells you whether a training harness is sound before you spend a GPU-day.

`harness.run.run(cfg)` is the whole pipeline; `train.py` hands it a composed Hydra config.
"""
