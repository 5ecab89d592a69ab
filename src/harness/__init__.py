"""harness: tells you whether a training harness is sound before you spend a GPU-day.

`harness.run.run(cfg)` is the whole pipeline; `train.py` hands it a composed Hydra config.
"""

from harness.schema import register as _register_schema

_register_schema()  # before any compose: conf/train.yaml's defaults start from it
