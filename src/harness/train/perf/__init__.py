"""How fast a run goes and what keeps it from going faster; the package imports nothing itself.

readout.py   the step's one copy to the host
speed.py     the Speed callback: perf/ figures, verdict.json's perf, the data_wait symptom
timeline.py  where a step's time goes, phase by phase, without a device sync
flops.py     a training batch's FLOPs, counted once
peak.py      the device's peak FLOP/s: the GPU table, perf.peak_flops, a CPU's measured and cached
wall.py      the run's whole wall time by phase, start-up to exit: verdict.json's perf.wall
copies.py      what copies device to host in a step, and whose code asked
host_sync.py   the host_sync symptom: the user's copies to the host in a step
recompiles.py  the recompiles symptom: the compiled forward compiled again and again
straggler.py   the straggler symptom: a rank slower than the others outside collectives
watches.py     the perf callbacks the training task adds: the Speed and the symptoms' watches"""
