"""The preflight tests of examples/checks.py: pytest tests that train.py runs before training.

    python train.py +preflight_tests=[examples/preflight.py]

Fixtures (from harness.checks.preflight): model, batch, data, cfg, and record (put a CheckResult in
the preflight table and verdict.json). A FAIL stops the run before training (exit 3)."""

from examples.checks import eval_deterministic
from harness.checks import FAIL


def test_eval_deterministic(model, batch, cfg, record):
    result = record(eval_deterministic(model, batch, cfg))
    assert result.status != FAIL, result.detail
