"""Preflight checks: plain functions `(model, batch or datamodule, cfg) -> CheckResult`.

They need only the contracts of docs/contracts.md, so a fork's own model or data is checked the same way.

    result.py           CheckResult and its statuses, the sample batch and the passes the model checks share
    data_reads.py       what the data checks read of a datamodule, read once (its loaders' first batches, samples)
    batch_format.py     batch_format and ids_in_range (a Batch's keys, shapes and ids); sample_rows, the batch
                        the model checks run on, and why it may be unusable
    mask.py             loss_mask;   roundtrip.py   data_roundtrip, static_batches;   diagnose.py   the cause of a
                        failed round trip;   special_tokens.py   special_tokens (BOS, end of text);
                        splits.py   split_overlap;   loaders.py   train_loader, epoch_order
    gradients.py        gradient_flow, finite;   behaviour.py   init_loss, determinism, global_rng, twins
    leaks.py            batch_independence, causality, word_order, input_dependence (trace.py names the module)
    documents.py        document_isolation: packed documents a batch declares stay apart
    watched_forward.py  one eval-mode forward watched from inside, which architecture.py reads: residual,
                        attention_scale (score_scale.py: the factor applied to q·kᵀ), stable_log_probs
    preflight.py        run_preflight: every check through pytest (preflight_tests.py), the table, the verdict rows
    sharded.py          the preflight of a model built on the meta device (trainer=fsdp, meta_init)
    started.py          the rows read as training starts: precision.py (the precision in use), rank_data.py
                        (every rank reads its own data), the model rows of a model sharded from the meta device"""

from harness.checks.architecture import attention_scale, residual, stable_log_probs
from harness.checks.batch_format import batch_format, ids_in_range, sample_rows
from harness.checks.behaviour import determinism, global_rng, init_loss, twins
from harness.checks.data_reads import DataReads
from harness.checks.documents import document_isolation
from harness.checks.gradients import finite, gradient_flow
from harness.checks.leaks import batch_independence, causality, input_dependence, word_order
from harness.checks.loaders import epoch_order, train_loader
from harness.checks.mask import loss_mask
from harness.checks.result import FAIL, PASS, SKIP, WARN, CheckResult, sample_batch
from harness.checks.roundtrip import data_roundtrip, static_batches
from harness.checks.special_tokens import special_tokens
from harness.checks.splits import split_overlap

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
