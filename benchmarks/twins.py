"""Each twin's loop version against its vectorized version at its default (bench) size."""

from __future__ import annotations

from functools import partial

import torch

from benchmarks import ratio, write
from harness.ops import registered

TARGET = 50.0  # the vectorized version is at least this many times faster


def main() -> dict:
    speedups, details = {}, {}
    for cls in registered():
        inputs = cls.example_inputs(torch.Generator().manual_seed(0), **cls.bench_shape)
        twin = cls()
        with torch.no_grad():
            r = ratio(
                partial(twin.loop, *inputs), partial(twin.vectorized, *inputs), reps=5, inner=2, warmup=1
            )
        speedups[cls.__name__] = round(r["median"], 1)
        details[cls.__name__] = {"shape": cls.bench_shape, **r}
    write("twins", speedups, {"target": f">= {TARGET} each", "loop_over_vectorized": details})
    return {name: (value, value >= TARGET) for name, value in speedups.items()}
