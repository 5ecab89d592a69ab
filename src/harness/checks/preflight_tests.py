"""The preflight as pytest tests over this run's model, data and config (fixtures from
harness.checks.preflight.PreflightPlugin: model, data, data_reads, batch, cfg, record). A fork adds files with
`preflight_tests` (docs/extending.md)."""

import pytest

from harness import checks
from harness.checks.at_start.after_sharding import meta_device_row
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
        record(meta_device_row(check.__name__))
        return
    result = record(check(model, batch, cfg))
    assert result.status != checks.FAIL, result.detail


def test_twins(record):
    result = record(checks.twins())
    assert result.status != checks.FAIL, result.detail
