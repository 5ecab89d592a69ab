"""Preflight checks: plain functions `(model, batch or datamodule, cfg) -> CheckResult`.

They need only the contracts of docs/contracts.md, so a fork's own model or data is checked the same way.
`harness.checks.preflight` runs them through pytest before training (see preflight_tests.py)."""

from harness.checks.base import FAIL, PASS, WARN, CheckResult, sample_batch
from harness.checks.behaviour import determinism, global_rng, init_loss, twins
from harness.checks.data import data_roundtrip, static_batches
from harness.checks.gradients import finite, gradient_flow
from harness.checks.leaks import batch_independence, causality, input_dependence, word_order

#: every built-in check, in the order the preflight table shows them
MODEL_CHECKS = (
    gradient_flow,
    batch_independence,
    causality,
    word_order,
    init_loss,
    determinism,
    global_rng,
    finite,
    input_dependence,
)
DATA_CHECKS = (data_roundtrip, static_batches)

__all__ = [
    "CheckResult",
    "DATA_CHECKS",
    "FAIL",
    "MODEL_CHECKS",
    "PASS",
    "WARN",
    "batch_independence",
    "causality",
    "data_roundtrip",
    "determinism",
    "finite",
    "global_rng",
    "gradient_flow",
    "init_loss",
    "input_dependence",
    "sample_batch",
    "static_batches",
    "twins",
    "word_order",
]
