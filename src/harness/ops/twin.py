"""The Twin pattern (practice P5): every custom tensor transformation is written twice.

`loop` indexes element by element and is obviously right: it is the specification. `vectorized` is
the fast version the model runs. Calling a twin runs one or the other by its `vectorize` flag; the
loop logs a warning the first time it runs, so a slow run never goes unnoticed. Every subclass is
registered by being a subclass: `registered()` finds them all, and one test compares each pair.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class Twin:
    """Subclasses implement `loop`, `vectorized` and `example_inputs`; they need no registration."""

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
