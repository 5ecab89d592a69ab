"""debug=profiler's profiler (conf/debug/profiler.yaml): `SimpleProfiler`, Lightning's, its report both saved
in the run dir and printed through the harness's logger (Lightning's own does one or the other)."""

from __future__ import annotations

import logging
import os

from pytorch_lightning.profilers import SimpleProfiler as LightningSimpleProfiler

log = logging.getLogger(__name__)


class SimpleProfiler(LightningSimpleProfiler):
    """Lightning's SimpleProfiler, its report saved as `dirpath/<stage>-<filename>.txt` and printed on rank 0."""

    def describe(self) -> None:
        summary = self.summary()
        path = (
            os.path.join(self.dirpath, self._prepare_filename()) if self.dirpath and self.filename else None
        )
        super().describe()
        if summary and self.local_rank == 0:
            log.info("profile%s:\n%s", f" (saved in {path})" if path else "", summary)
