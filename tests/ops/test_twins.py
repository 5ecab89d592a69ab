"""The twins (harness.ops): loop and vectorized agree, in value and in gradient, on every registered twin and
every one of its test shapes; the loop version warns once, the vectorized one never; and the preflight's
`twins` check names a planted twin that disagrees (defined inside its test and removed again afterwards)."""

from __future__ import annotations

import copy
import gc
import logging

import pytest
import torch
from torch import nn

import harness.ops
from harness import checks
from harness.checks import FAIL, PASS
from harness.ops import CausalAttention, Twin, max_difference, registered

CFG = {"seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


# ---------------------------------------------------------------------------------------------------------
# 1c. a twin whose vectorized version disagrees with its loop version
# ---------------------------------------------------------------------------------------------------------


def twin_gaps(cls, tolerance: float = 1e-4) -> list[str]:
    """One line per test shape where `cls`'s loop and vectorized versions differ by more than `tolerance`."""
    failures = []
    for k, shape in enumerate(cls.test_shapes):
        inputs = cls.example_inputs(torch.Generator().manual_seed(k), **shape)
        twin = cls(vectorize=True)
        with torch.no_grad():
            expected, got = twin.loop(*inputs), twin.vectorized(*inputs)
        largest = max_difference(expected, got)
        if not largest <= tolerance:  # also catches nan
            failures.append(
                f"{cls.__name__} at {shape}: largest difference {largest:.3e}, "
                f"mean {mean_difference(expected, got):.3e} (tolerance {tolerance})"
            )
    return failures


def _flat(x) -> torch.Tensor:
    if isinstance(x, (tuple, list)):
        return torch.cat([_flat(y) for y in x])
    return x.detach().double().flatten()


def mean_difference(a, b) -> float:
    a, b = _flat(a), _flat(b)
    return (a - b).abs().mean().item() if a.shape == b.shape and a.numel() else float("nan")


def test_twins_check_names_the_twin_that_disagrees():
    class PlantedPrefixSum(Twin):
        """out[t] = x[0] + ... + x[t]; BUG: the vectorized version is the exclusive sum (misses x[t])."""

        test_shapes = ({"b": 2, "time": 5}, {"b": 1, "time": 9})

        def loop(self, x):
            return torch.stack([x[:, : t + 1].sum(dim=1) for t in range(x.shape[1])], dim=1)

        def vectorized(self, x):
            return x.cumsum(dim=1) - x

        @classmethod
        def example_inputs(cls, generator, b, time):
            return (torch.randn(b, time, generator=generator),)

    try:
        assert PlantedPrefixSum in registered()
        result = checks.twins()
        assert result.status == FAIL, result
        assert "PlantedPrefixSum" in result.detail, result.detail
        gaps = twin_gaps(PlantedPrefixSum)  # the equivalence test below would catch it too
        assert len(gaps) == len(PlantedPrefixSum.test_shapes), gaps
    finally:
        del PlantedPrefixSum
        gc.collect()
    assert "PlantedPrefixSum" not in [cls.__name__ for cls in registered()], "the planted twin leaked"
    assert checks.twins().status == PASS


def test_twin_whose_vectorized_version_returns_nan():
    class PlantedNaNTwin(Twin):
        test_shapes = ({"n": 3},)

        def loop(self, x):
            return x

        def vectorized(self, x):
            return x * float("nan")

        @classmethod
        def example_inputs(cls, generator, n):
            return (torch.randn(n, generator=generator),)

    try:
        result = checks.twins()
        assert twin_gaps(PlantedNaNTwin), "the equivalence test below does catch it"
    finally:
        del PlantedNaNTwin
        gc.collect()
    assert "PlantedNaNTwin" not in [cls.__name__ for cls in registered()], "the planted twin leaked"
    assert result.status == FAIL and "PlantedNaNTwin" in result.detail, result


# ---------------------------------------------------------------------------------------------------------
# 3. the twins: loop and vectorized agree on every registered twin, every test shape, value and gradient
# ---------------------------------------------------------------------------------------------------------

TWINS = registered()  # the built-in twins (importing harness.ops loaded them); planted ones come and go


def test_builtin_twins_are_registered():
    assert CausalAttention in TWINS  # the gradient test below covers it
    names = {cls.__name__ for cls in TWINS}
    assert {"CausalAttention", "LSTMScan", "MaskedCrossEntropy", "TanhScan"} <= names, names
    assert all(cls.test_shapes for cls in TWINS), "a twin without test shapes is never compared"


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_twin_loop_and_vectorized_agree(cls):
    failures = twin_gaps(cls, tolerance=1e-4)
    assert not failures, "\n".join(failures)


def _gradients(version, inputs, generator: torch.Generator):
    """Gradients of a random projection of version(*inputs) w.r.t. its float inputs and module parameters."""
    inputs, leaves, prepared = copy.deepcopy(inputs), [], []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = x.detach().clone().requires_grad_(True)
            leaves.append(x)
        elif isinstance(x, nn.Module):
            leaves.extend(x.parameters())
        prepared.append(x)
    out = version(*prepared)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    loss = sum((o * torch.randn(o.shape, generator=generator, dtype=o.dtype)).sum() for o in outs)
    return torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_twin_gradients_agree(cls):
    for k, shape in enumerate(cls.test_shapes[:3]):
        inputs = cls.example_inputs(torch.Generator().manual_seed(k), **shape)
        twin = cls(vectorize=True)
        expected = _gradients(twin.loop, inputs, torch.Generator().manual_seed(100 + k))
        got = _gradients(twin.vectorized, inputs, torch.Generator().manual_seed(100 + k))
        assert expected, f"{cls.__name__} at {shape}: nothing to differentiate"
        largest = max_difference(expected, got)
        assert largest <= 1e-4, (
            f"{cls.__name__} at {shape}: gradients differ by up to {largest:.3e}, "
            f"mean {mean_difference(expected, got):.3e}"
        )


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_loop_version_warns_once_and_vectorized_never(cls, caplog):
    inputs = cls.example_inputs(torch.Generator().manual_seed(0), **cls.test_shapes[0])
    with caplog.at_level(logging.WARNING, logger="harness.ops"):
        slow = cls(vectorize=False)
        slow(*inputs)
        slow(*inputs)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert cls.__name__ in warnings[0].getMessage() and "loop" in warnings[0].getMessage()

        caplog.clear()
        fast = cls(vectorize=True)
        fast(*inputs)
        fast(*inputs)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_harness_twins_exports_every_builtin_twin():
    exported = {getattr(harness.ops, name) for name in harness.ops.__all__}
    assert {cls for cls in TWINS if cls.__module__.startswith("harness.")} <= exported
