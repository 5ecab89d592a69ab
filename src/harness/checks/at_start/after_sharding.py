"""The preflight of a model too large for one rank (trainer=fsdp with trainer.strategy.meta_init=true): built on the
meta device, it has no weights until it is sharded. The data checks run as always, before training; a model check
that needs the whole model on one rank is a SKIP row that says so (never a PASS nobody ran); those that need only
forward passes (AFTER_SHARDING) run once the model is sharded, on every rank in step (each pass gathers the
weights; harness.checks.at_start.start_checks), and their rows take the place of the SKIP ones. A FAIL there stops every rank
before the first step."""

from __future__ import annotations

from harness.checks.model.at_init import init_loss
from harness.checks.result import SKIP, CheckResult

#: the model checks that run on the sharded model: forward passes only, whose outputs are whole on every rank
AFTER_SHARDING = (init_loss,)


def skipped(name: str) -> CheckResult:
    """The row of a model check not run before sharding."""
    if name in {check.__name__ for check in AFTER_SHARDING}:
        why = "runs once the model is sharded (its row then replaces this one)"
    else:
        why = "needs the whole model on one rank"
    return CheckResult(
        name, SKIP, f"not run: the model is built on the meta device (trainer.strategy.meta_init); {why}"
    )
