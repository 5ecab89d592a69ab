"""The preflight: checks `(model, batch or datamodule, cfg) -> CheckResult` run through pytest before
training.

    result.py            CheckResult, its statuses, SampleBatch
    preflight.py         run_preflight, over preflight_tests.py
    data/                the data checks (DATA_CHECKS, run first)
    model/               the model checks (MODEL_CHECKS)
    at_start/            the rows read as training starts"""

from harness.checks.data.batch_format import batch_format, ids_in_range, sample_rows
from harness.checks.data.loaders import epoch_order, train_loader
from harness.checks.data.loss_mask import loss_mask
from harness.checks.data.reads import DataReads
from harness.checks.data.roundtrip import data_roundtrip, static_batches
from harness.checks.data.special_tokens import special_tokens
from harness.checks.data.split_overlap import split_overlap
from harness.checks.data.val_order import val_order
from harness.checks.model.architecture import attention_scale, residual, stable_log_probs
from harness.checks.model.at_init import determinism, global_rng, init_loss, twins
from harness.checks.model.dependence import batch_independence, causality, input_dependence, word_order
from harness.checks.model.document_isolation import document_isolation
from harness.checks.model.gradients import finite, gradient_flow
from harness.checks.result import FAIL, PASS, SKIP, WARN, CheckResult, sample_batch

#: every built-in check, in the order the preflight table shows them
MODEL_CHECKS = (
    gradient_flow,
    batch_independence,
    causality,
    document_isolation,
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
    special_tokens,
    split_overlap,
    train_loader,
    epoch_order,
    val_order,
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
    "special_tokens",
    "split_overlap",
    "train_loader",
    "epoch_order",
    "val_order",
    "FAIL",
    "MODEL_CHECKS",
    "PASS",
    "WARN",
    "attention_scale",
    "batch_independence",
    "causality",
    "data_roundtrip",
    "determinism",
    "document_isolation",
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
