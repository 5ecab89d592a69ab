"""`HostSync`: code outside the harness that copies device to host inside a training step, the `host_sync` symptom
named by file and line with its count a step; watched on a few sampled steps only (copies.py counts on a CPU)."""

from __future__ import annotations

import logging
import sys
import warnings
from collections import Counter

import pytorch_lightning as pl
import torch

from harness.compat import lightning_logs_now
from harness.errors import ConfigError
from harness.report.symptoms import Symptom
from harness.train.perf.copies import SHOWN, CopyCounter, outside, user_site
from harness.train.perf.readout import readout_of

log = logging.getLogger(__name__)

#: what CUDA's sync debug mode warns with, and the name a copy it caught is counted under
CUDA_WARNING, CUDA_CALL = "called a synchronizing CUDA operation", "a synchronizing CUDA call"
WARNINGS = warnings.__file__  # the warnings module's own frames, walked past


class SyncWarnings(warnings.catch_warnings):
    """While entered, each warning of CUDA's sync debug mode is counted in `counts[(step, site, CUDA_CALL)]` by the
    line `site(frame)` names (default: the user's, copies.user_site), not shown; other warnings go on as before.
    Restores both on exit."""

    def __init__(self, counts: Counter, step: int, site=user_site):
        super().__init__()
        self.counts, self.step, self.site = counts, step, site

    def __enter__(self):
        super().__enter__()
        warnings.filterwarnings("always", message=f".*{CUDA_WARNING}")
        shown = warnings.showwarning

        def caught(message, category, filename, lineno, file=None, line=None):
            if CUDA_WARNING not in str(message):
                return shown(message, category, filename, lineno, file, line)
            where = self.site(outside(sys._getframe(1), (WARNINGS,)))  # the stack that warned, from here out
            if where is not None:
                self.counts[(self.step, where, CUDA_CALL)] += 1

        warnings.showwarning = caught
        return self


class HostSync(pl.Callback):
    """Counts, on the sampled `steps` (each moved on to the first step Lightning logs nothing on), the copies to the
    host that code outside torch, Lightning and the harness asks for, by `file:line`; reports the `sites` lines that
    asked most as `host_sync` on global rank 0. No mode, hook or flag is on during any other step."""

    def __init__(self, steps: list[int] = (3, 7), sites: int = 5):
        if any(not isinstance(s, int) or s < 0 for s in steps):
            raise ConfigError("perf.symptoms.host_sync.steps", list(steps), "give steps >= 0, e.g. [3, 7]")
        if sites < 1:
            raise ConfigError("perf.symptoms.host_sync.sites", sites, "name at least 1 line (try 5)")
        self.steps, self.sites = sorted(set(steps)), sites
        self.counts: Counter = Counter()  # (step, where, call) -> copies
        self.due: list[int] = []  # the sampled steps still to come (none on a rank other than global rank 0)
        self.sampled: list[int] = []
        self.cuda = False
        self.step: int | None = None  # the step being watched
        self.mode: CopyCounter | None = None
        self.catching: SyncWarnings | None = None
        self.sync_mode: int | str = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.due = [s for s in self.steps if s >= trainer.global_step] if trainer.is_global_zero else []
        self.cuda = pl_module.device.type == "cuda"
        compiled = pl_module.__dict__.get("train_forward", pl_module.model) is not pl_module.model
        if compiled and not self.cuda and self.due:  # a mode on the stack would make dynamo compile it again
            log.info("host_sync: not counted under compile on a CPU (a function mode recompiles the forward)")
            self.due = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.step is not None or not self.due or trainer.global_step < self.due[0]:
            return
        if trainer.log_every_n_steps > 1 and lightning_logs_now(trainer):
            return  # a step that logs copies on purpose: the next one is sampled instead
        self.due.pop(0)
        self.step = trainer.global_step
        self.sampled.append(self.step)
        self.open_cuda() if self.cuda else self.open_cpu()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.step is not None and trainer.global_step > self.step:  # the optimizer stepped: it is over
            self.close()
            if not self.due:
                self.report(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.step is not None:
            self.close()
        if self.sampled:  # the run ended before every sampled step
            self.report(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.close()

    # --- watching a step ------------------------------------------------------------------------------------

    def open_cpu(self) -> None:
        self.mode = CopyCounter(self.counts)
        self.mode.step = self.step
        self.mode.__enter__()  # entered before the step's forward, left after its optimizer step: outermost

    def open_cuda(self) -> None:
        self.sync_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")  # each synchronizing call warns, from the stack that made it
        self.catching = SyncWarnings(self.counts, self.step)
        self.catching.__enter__()

    def close(self) -> None:
        """The watched step is over: the mode, or the sync debug mode and the warnings, back as they were."""
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        if self.catching is not None:
            torch.cuda.set_sync_debug_mode(self.sync_mode)
            self.catching.__exit__(None, None, None)
            self.catching = None
        self.step = None

    # --- what was seen --------------------------------------------------------------------------------------

    def report(self, trainer) -> None:
        """`host_sync` for each of the `sites` lines that asked most, with its copies a sampled step."""
        readout, sampled, counts = readout_of(trainer), self.sampled, self.counts
        self.due, self.sampled, self.counts = [], [], Counter()  # reported once
        if not counts:
            log.info("host_sync: steps %s watched, no copy to the host asked outside the harness", sampled)
        for symptom in host_syncs(counts, sampled, self.sites):
            if readout is not None:
                readout.report(symptom)
            else:
                log.warning("%s", symptom.line())


def host_syncs(counts: Counter, sampled: list[int], sites: int) -> list[Symptom]:
    """The `host_sync` symptoms of `counts` ((step, where, call) -> copies) over the `sampled` steps, the
    `sites` lines with the most copies first."""
    by_site: dict[str, Counter] = {}
    first: dict[str, int] = {}
    for (step, where, call), count in counts.items():
        by_site.setdefault(where, Counter())[call] += count
        first[where] = min(step, first.get(where, step))
    ranked = sorted(by_site.items(), key=lambda item: -sum(item[1].values()))[:sites]
    steps = ", ".join(map(str, sampled))
    symptoms = []
    for where, calls in ranked:
        per_step = sum(calls.values()) / len(sampled)
        kinds = ", ".join(f"{SHOWN.get(call, call)} x{n / len(sampled):g}" for call, n in calls.most_common())
        detail = (
            f"{per_step:g} copies to the host a training step ({kinds}; sampled steps {steps}); each makes the "
            "host wait until the device has run everything queued before it"
        )
        symptoms.append(Symptom("host_sync", first[where], where, per_step, detail))
    return symptoms
