"""The preflight: pytest tests over THIS run's model, data and config, run by train.py before training.

Fixtures come from harness.checks.preflight.PreflightPlugin: `model` (the nn.Module), `data` (the
datamodule, set up: the fork's own, in overfit mode too), `data_reads` (what the data checks read of it, read
once), `batch` (a few training examples, collated by the fork's own collate), `cfg` (the composed config),
`record` (call it with a CheckResult so it lands in the table and verdict.json). Add a test here (pytest does
not rewrite this file's asserts: say why through `record`), or set `preflight_tests` in the config to more
files (pytest as usual: plugins, assert messages), and it runs before every training run; a test that fails
without recording a result still shows up as FAIL under its own name."""

import pytest

from harness import checks
from harness.checks.at_start.after_sharding import skipped
from harness.train.distributed.sharding import on_meta_device


@pytest.mark.parametrize("check", checks.DATA_CHECKS, ids=lambda c: c.__name__)
def test_data(check, model, data_reads, cfg, record):
    result = record(check(model, data_reads, cfg))
    assert result.status != checks.FAIL, result.detail


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
def test_model(check, model, batch, cfg, record):
    if getattr(batch, "unusable", None):  # the data rows above say what is wrong with it: said once
        record(checks.CheckResult(check.__name__, checks.SKIP, f"not run: the sample batch {batch.unusable}"))
        return
    if on_meta_device(model):  # no weights before sharding (trainer.strategy.meta_init)
        record(skipped(check.__name__))
        return
    result = record(check(model, batch, cfg))
    assert result.status != checks.FAIL, result.detail


def test_twins(record):
    result = record(checks.twins())
    assert result.status != checks.FAIL, result.detail
