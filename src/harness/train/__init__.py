"""Training: the run's stages (run.py), the LightningModule (module.py), the Trainer and callbacks (trainer.py),
the regimes (overfit.py, full.py), the optimizer and schedule (optim.py), the trackers (loggers.py), checkpoints
and resume (checkpoints.py), the non-finite guard (nonfinite.py), signals (signals.py: the gates, light;
interrupt.py: a signal during a training step), ranks and devices (devices.py), the rules of their keys
(rules.py), debug=profiler's profiler (profiling.py).

The package imports nothing itself: signals.py, devices.py and rules.py are read before torch is."""
