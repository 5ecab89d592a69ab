"""What a fork brings, written as a fork would, for the tests to plug in by `_target_`: models (models.py,
sick_models.py, real_models/), datamodules (data/), a loss (losses.py) and the parts of a scaled run (scale.py)."""
