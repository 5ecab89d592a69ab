"""Preflight checks: plain functions `(model, batch or datamodule, cfg) -> CheckResult`.

They need only the contracts of docs/contracts.md, so a fork's own model or data is checked the same way.
`harness.checks.preflight` runs them through pytest before training (see preflight_tests.py)."""

from harness.checks.architecture import attention_scale, residual, stable_log_probs
from harness.checks.base import FAIL, PASS, SKIP, WARN, CheckResult, sample_batch, sample_rows
from harness.checks.batch import batch_format, ids_in_range
from harness.checks.behaviour import determinism, global_rng, init_loss, twins
from harness.checks.gradients import finite, gradient_flow
from harness.checks.leaks import batch_independence, causality, input_dependence, word_order
from harness.checks.loaders import epoch_order, train_loader
from harness.checks.mask import loss_mask
from harness.checks.reads import DataReads
from harness.checks.roundtrip import data_roundtrip, static_batches
from harness.checks.splits import split_overlap

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
    residual,
    attention_scale,
    stable_log_probs,
)
#: the data checks, run first: a batch they find unusable is not run through the model checks
DATA_CHECKS = (
    batch_format,
    ids_in_range,
    loss_mask,
    data_roundtrip,
    split_overlap,
    train_loader,
    epoch_order,
    static_batches,
)

__all__ = [
    "CheckResult",
    "DATA_CHECKS",
    "DataReads",
    "SKIP",
    "batch_format",
    "ids_in_range",
    "loss_mask",
    "sample_rows",
    "split_overlap",
    "train_loader",
    "epoch_order",
    "FAIL",
    "MODEL_CHECKS",
    "PASS",
    "WARN",
    "attention_scale",
    "batch_independence",
    "causality",
    "data_roundtrip",
    "determinism",
    "finite",
    "global_rng",
    "gradient_flow",
    "init_loss",
    "input_dependence",
    "residual",
    "sample_batch",
    "stable_log_probs",
    "static_batches",
    "twins",
    "word_order",
]
