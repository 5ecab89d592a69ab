"""Training's parts, put together by harness.tasks.training; the package imports nothing itself.

module.py       the LightningModule;   step_loss.py   a step's loss
trainer.py      Trainer, callbacks;   trainer_args.py   the Trainer arguments the harness sets
overfit.py      mode=overfit;   full_run.py   mode=full;   optim.py   optimizer, schedule
loggers.py      the trackers;   checkpoints.py   checkpoints, resume
interrupt.py    a signal mid-step;   nonfinite.py   the guard;   profiling.py   debug=profiler
distributed/    several processes;   perf/   how fast, and what slows it"""
