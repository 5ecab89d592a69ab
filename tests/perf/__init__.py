"""The speed (harness.train.perf): the peak table and the CPU's measured peak, the FLOP count, the time split, the
speed figures of real runs, and the data_wait symptom against a planted slow loader."""
