"""Training (harness.train): overfit mode, the optimizer and schedule, the loggers and trackers, faults and
resume."""
