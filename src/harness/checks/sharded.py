"""The preflight of a model too large for one rank (trainer=fsdp with trainer.strategy.meta_init=true): built on the
meta device, it has no weights until it is sharded. The data checks run as always, before training; a model check
that needs the whole model on one rank is a SKIP row that says so (never a PASS nobody ran); those that need only
forward passes (AFTER_SHARDING) run once the model is sharded, on every rank in step (each pass gathers the
weights), and their rows take the place of the SKIP ones. A FAIL there stops every rank before the first step."""

from __future__ import annotations

import logging
import time

import pytorch_lightning as pl

from harness.checks.base import FAIL, SKIP, CheckResult, sample_rows
from harness.checks.behaviour import init_loss
from harness.errors import PreflightFailed
from harness.seeding import rng_state, set_rng_state
from harness.train.sharding import reshard

log = logging.getLogger(__name__)

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


class ShardedPreflight(pl.Callback):
    """Runs AFTER_SHARDING on the sharded model at the start of fit, on every rank, on the preflight's sample batch
    (the datamodule's first training examples, the same on every rank), the generators left as they were; the
    rows go into `checks` (the verdict's, rank 0's; empty on a rank Lightning started)."""

    def __init__(self, data, cfg, checks: list[dict]):
        self.data, self.cfg, self.checks = getattr(data, "base", data), cfg, checks

    def on_fit_start(self, trainer, pl_module) -> None:
        batch, generators = sample_rows(self.data), rng_state()
        if batch.unusable is not None:  # the data rows say what is wrong with it; the SKIP rows stay
            return
        rows = {}
        try:
            for check in AFTER_SHARDING:
                started = time.perf_counter()
                try:
                    result = check(pl_module.model, batch, self.cfg)
                except Exception as err:  # as the preflight's pytest session makes of a crash: a FAIL row
                    detail = (
                        f"raised {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                    )
                    result = CheckResult(
                        check.__name__, FAIL, f"{detail}: a bug in the check or in the code it ran"
                    )
                rows[result.name] = {**result.as_dict(), "seconds": round(time.perf_counter() - started, 3)}
        finally:
            set_rng_state(generators)
            reshard(pl_module.model)
        self.checks[:] = [rows.get(row["name"], row) for row in self.checks]
        if trainer.is_global_zero:
            for row in rows.values():
                log.info("preflight, after sharding: %s %s (%s)", row["name"], row["status"], row["detail"])
        failed = [row for row in rows.values() if row["status"] == FAIL]
        if failed and self.cfg.preflight is True:
            raise PreflightFailed(f"{failed[0]['name']}: {failed[0]['detail']}")
