"""The Twin pattern (practice P5): each custom tensor transformation written as a plain loop (the spec) and
vectorized (what runs); `registered()` finds every subclass, and one test compares each pair."""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class Twin:
    """An operation written twice: a subclass implements `loop` (index by index, obviously right),
    `vectorized` and `example_inputs`. Calling it runs one by `vectorize`, warning once when the loop runs.
    Subclassing registers it."""

    #: shapes the equivalence test and the `twins` check try, as keyword arguments of example_inputs
    test_shapes: tuple[dict, ...] = ()
    #: the shape `make bench` times the two versions at
    bench_shape: dict = {}

    def __init__(self, vectorize: bool = True):
        self.vectorize = vectorize
        self._warned = False

    def __call__(self, *args, **kwargs):
        if self.vectorize:
            return self.vectorized(*args, **kwargs)
        if not self._warned:
            log.warning(
                "%s is running its loop version (slow; set vectorize=true for speed)", type(self).__name__
            )
            self._warned = True
        return self.loop(*args, **kwargs)

    def loop(self, *args, **kwargs):
        raise NotImplementedError

    def vectorized(self, *args, **kwargs):
        raise NotImplementedError

    @classmethod
    def example_inputs(cls, generator: torch.Generator, **shape) -> tuple:
        """Random arguments for both versions at the given shape."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vectorize={self.vectorize})"


def registered() -> list[type[Twin]]:
    """Every Twin subclass defined so far (import harness.ops first to load the built-in ones)."""
    found, stack = [], list(Twin.__subclasses__())
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__name__)


def max_difference(a, b) -> float:
    """Largest absolute difference between two tensors, or between tensors of two (nested) tuples."""
    if isinstance(a, (tuple, list)):
        return max(max_difference(x, y) for x, y in zip(a, b, strict=True))
    if a.shape != b.shape:
        return float("inf")
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
