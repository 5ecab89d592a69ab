"""make bench: run every benchmark (or those named), write outputs/bench/*.json and a markdown table."""

from __future__ import annotations

import importlib
import os
import sys

import torch

from harness.bench import OUT, machine

#: benchmark modules under harness.bench, each with main() -> {figure: (value, target met?)}
BENCHMARKS = ("twins", "loop", "faults", "startup", "sweep", "probes")


def main(names: list[str]) -> int:
    # One torch thread unless BENCH_THREADS says otherwise: on a shared 2-core machine a second thread waits on
    # whatever else runs there, noise larger than the 2% some targets allow. Ratios hold either way.
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    rows = []
    for name in names or BENCHMARKS:
        print(f"bench {name} ...", flush=True)
        for figure, (value, met) in importlib.import_module(f"harness.bench.{name}").main().items():
            rows.append(f"| {name} | {figure} | {value} | {'yes' if met else 'NO'} |")
            print(f"  {figure}: {value} ({'target met' if met else 'TARGET MISSED'})", flush=True)
    table = "\n".join([f"Machine: {machine()}", "", "| benchmark | figure | value | target met |",
                       "|---|---|---|---|", *rows])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "README.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
