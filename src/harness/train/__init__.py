"""Training's parts, as the training task (harness.tasks.training) puts them together:

    module.py       the LightningModule around a model;   step_loss.py   a step's loss over micro-batches and ranks
    trainer.py      the Trainer and its callbacks;   rules.py   the training keys' rules, the Trainer arguments set
    overfit.py      the overfit regime;   full_run.py   mode=full: checkpoints, validation, resume
    optim.py        the optimizer and schedule;   loggers.py   the trackers
    checkpoints.py  checkpoints and resume;   interrupt.py   a signal during a training step
    nonfinite.py    the non-finite guard;   profiling.py   debug=profiler's profiler
    distributed/    several processes: devices, sharding, heartbeats, the watchdog

The package imports nothing itself: rules.py and distributed/devices.py are read before torch is."""
