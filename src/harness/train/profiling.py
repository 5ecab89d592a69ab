"""debug=profiler's profiler (conf/debug/profiler.yaml): Lightning's SimpleProfiler, its report both saved in the
run dir and printed.

Lightning's own writes the report to a file when it is given one, and only logs it otherwise; a user who asks
for a profile wants to read it at once and find it later, so this one does both. Printed through harness's
logger: it shows whatever level Lightning's own loggers are held at (conf/train.yaml keeps them at WARNING)."""

from __future__ import annotations

import logging
import os

from pytorch_lightning.profilers import SimpleProfiler as LightningSimpleProfiler

log = logging.getLogger(__name__)


class SimpleProfiler(LightningSimpleProfiler):
    """SimpleProfiler(dirpath, filename, extended): the report goes to `dirpath/<stage>-<filename>.txt` and to the
    console (rank 0 alone; every rank writes its own file, suffixed with its local rank)."""

    def describe(self) -> None:
        summary = self.summary()
        path = (
            os.path.join(self.dirpath, self._prepare_filename()) if self.dirpath and self.filename else None
        )
        super().describe()
        if summary and self.local_rank == 0:
            log.info("profile%s:\n%s", f" (saved in {path})" if path else "", summary)
