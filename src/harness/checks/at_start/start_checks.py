"""StartChecks: the preflight rows read once training starts, on every rank in step: the model checks after
sharding (meta_init), `precision` before the first step, `rank_data` at the first batch. Rank 0 logs and keeps
each row; a FAIL stops every rank (PREFLIGHT_FAIL) unless preflight=warn."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytorch_lightning as pl
import torch.distributed as dist
from pytorch_lightning.utilities.seed import isolate_rng

from harness.checks.at_start.after_sharding import AFTER_SHARDING
from harness.checks.at_start.precision import asked_dtype, precision
from harness.checks.at_start.rank_data import rank_data, row_hashes
from harness.checks.data.batch_format import sample_rows
from harness.checks.result import FAIL, CheckResult
from harness.data.batch import to_device
from harness.errors import PreflightFailed
from harness.train.distributed.sharding import on_meta, reshard

log = logging.getLogger(__name__)


def _timed_row(name: str, check: Callable[[], CheckResult]) -> dict:
    """`check()`'s row with its seconds; a check that raises is a FAIL row, as in the preflight."""
    started = time.perf_counter()
    try:
        result = check()
    except Exception as err:
        first_line = str(err).splitlines()[0][:300] if str(err) else ""
        result = CheckResult(
            name, FAIL, f"raised {type(err).__name__}: {first_line}: a bug in the check or in the code it ran"
        )
    return {**result.as_dict(), "seconds": round(time.perf_counter() - started, 3)}


class StartChecks(pl.Callback):
    """The callback running those rows. `checks`: the verdict's rows they join (empty on a rank Lightning
    started); `shared_data`: ranks read the same examples by design (overfit mode): no rank_data."""

    def __init__(self, data, cfg, checks: list[dict], shared_data: bool = False):
        self.data, self.cfg, self.checks = getattr(data, "base", data), cfg, checks
        self.read_ranks = not shared_data

    def on_fit_start(self, trainer, pl_module) -> None:
        batch = sample_rows(self.data)
        if batch.unusable is not None:  # the data rows say what is wrong with it; the SKIP rows stay
            return
        model, rows = pl_module.model, []
        batch = to_device(batch, model)
        try:
            # the rows draw: training starts as if they never ran (an exception out of here ends the run)
            with isolate_rng():
                if on_meta(self.cfg):
                    rows += [
                        _timed_row(c.__name__, lambda c=c: c(model, batch, self.cfg)) for c in AFTER_SHARDING
                    ]
                dtype, setting = asked_dtype(trainer)
                context = trainer.precision_plugin.forward_context
                rows.append(
                    _timed_row(
                        "precision",
                        lambda: precision(model, batch, pl_module.loss, context(), dtype, setting),
                    )
                )
        finally:
            reshard(model)
        self.record(trainer, rows)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.read_ranks:
            return
        self.read_ranks = False  # the first batch only
        if trainer.world_size < 2 or not dist.is_initialized():
            return
        hashes = [None] * trainer.world_size
        dist.all_gather_object(hashes, row_hashes(batch))
        self.record(trainer, [_timed_row("rank_data", lambda: rank_data(hashes, trainer.train_dataloader))])

    def record(self, trainer, rows: list[dict]) -> None:
        """The rows into the verdict's checks (replacing one of the same name), logged on rank 0; a FAIL
        raises PreflightFailed on every rank under preflight=true."""
        named = {row["name"]: row for row in rows}
        self.checks[:] = [named.pop(row["name"], row) for row in self.checks] + list(named.values())
        if trainer.is_global_zero:
            for row in rows:
                level = logging.ERROR if row["status"] == FAIL else logging.INFO
                log.log(
                    level,
                    "preflight, as training starts: %s %s (%s)",
                    row["name"],
                    row["status"],
                    row["detail"],
                )
        failed = [row for row in rows if row["status"] == FAIL]
        if failed and self.cfg.preflight is True:
            raise PreflightFailed(failed[0]["name"], failed[0]["detail"])
