"""What measuring the speed costs, in perf.json: `perf`, the step time of a real Lightning training step with the
Speed callback (harness.train.perf: its marks, the harness's hooks and the loader's fetches timed, the figures
deferred to the readout) over the same step without it, target <= 1.01; `perf_hooks`, 1 + its own hooks' share."""

# How: benchmarks.probes' Bench, one Trainer switching the Speed in and out every CHUNK steps (the tiny model: the
# largest share a fixed cost per step can take), the readout and the harness's own callbacks in both, mode=full's
# log_every_n_steps=10. Switched out, the Speed also lets go of the hooks it times (teardown); switched in, it
# takes them again (on_fit_start): the off side times nothing.

from __future__ import annotations

from benchmarks import OUT, write
from benchmarks.probes import INNER, Bench, compare_hooks, timed_hooks
from harness.train.loggers import MetricsCSV
from harness.train.perf.readout import Readout
from harness.train.perf.speed import Speed

TARGET = 1.01
MODEL = "tiny"


def _switches(speed: Speed, readout: Readout) -> dict:
    def on(bench: Bench) -> None:
        speed.teardown(bench.trainer, bench.module, "fit")  # the first time, what it took as the fit started
        bench.use([speed, readout])
        speed.on_fit_start(bench.trainer, bench.module)
        speed.on_train_start(bench.trainer, bench.module)

    def off(bench: Bench) -> None:
        speed.teardown(bench.trainer, bench.module, "fit")
        bench.use([readout])

    return {"perf": on, "off": off}


def main(reps: int = 7, inner: int = INNER) -> dict:
    clock = [0.0]
    speed, readout = Speed(peak_cache=str(OUT / "perf_peaks.json")), Readout()
    runs = OUT / "perf_runs"
    runs.mkdir(parents=True, exist_ok=True)
    logger = MetricsCSV(runs, name="", version="")
    bench = Bench("perf", MODEL, [*timed_hooks([speed], clock), readout], [logger], _switches(speed, readout))
    try:
        bench.run("perf", 20)  # past the one-off costs: the FLOP count, the CPU's peak, first steps
        bench.run("off", 20)
        result = compare_hooks(bench, "perf", clock, reps, inner)
    finally:
        bench.close()
    ratio, hooks = round(result["median"], 4), round(1 + result["hooks_share"], 4)
    write("perf", {MODEL: {"perf": ratio, "perf_hooks": hooks}}, {"target": f"<= {TARGET}", MODEL: result})
    spread = (round(result["min"], 4), round(result["max"], 4), result["reps"])
    return {
        "perf": (ratio, ratio <= TARGET and hooks <= TARGET, spread),
        "perf_hooks": (hooks, hooks <= TARGET),
    }
