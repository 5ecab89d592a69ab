"""The model checks of a model built on the meta device (trainer.strategy.meta_init): AFTER_SHARDING run once
it is sharded (harness.checks.at_start.start_checks); the others are SKIP rows (meta_device_row)."""

from __future__ import annotations

from harness.checks.model.at_init import init_loss
from harness.checks.result import SKIP, CheckResult

#: the model checks run on the sharded model, every rank in step: forward passes only, whose outputs are whole
#: on every rank (the others need the whole model on one rank); a FAIL stops every rank before the first step
AFTER_SHARDING = (init_loss,)


def meta_device_row(name: str) -> CheckResult:
    """The SKIP row of model check `name` before the model is sharded."""
    if name in {check.__name__ for check in AFTER_SHARDING}:
        why = "runs once the model is sharded (its row then replaces this one)"
    else:
        why = "needs the whole model on one rank"
    return CheckResult(
        name, SKIP, f"not run: the model is built on the meta device (trainer.strategy.meta_init); {why}"
    )
