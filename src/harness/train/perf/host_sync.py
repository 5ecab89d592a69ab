"""`HostSync`: code outside the harness that copies device to host inside a training step, the `host_sync` symptom
named by file and line with its count a step (a library's line only where it copies again and again); watched on a
few sampled steps only (copies.py counts on a CPU)."""

from __future__ import annotations

import logging
import sys
import warnings
from collections import Counter

import pytorch_lightning as pl
import torch

from harness.compat import lightning_logs_now
from harness.report.symptoms import Symptom
from harness.train.perf.copies import (
    CALLED_FROM,
    SHOWN,
    CopyCounter,
    call_path,
    library_of,
    outside,
    user_site,
)
from harness.train.perf.readout import readout_of

log = logging.getLogger(__name__)

#: what CUDA's sync debug mode warns with, and the name a copy it caught is counted under
CUDA_WARNING, CUDA_CALL = "called a synchronizing CUDA operation", "a synchronizing CUDA call"
WARNINGS = warnings.__file__  # the warnings module's own frames, walked past
#: the fix of a copy an installed library makes: the user's line only calls it
LIBRARY_FIX = (
    "the copy is {library}'s own, at {asked}: change what {caller} passes so that {library} takes a path without "
    "it (the condition it tests there says which argument), or upgrade {library} (pip install -U {library})"
)


class SyncWarnings(warnings.catch_warnings):
    """While entered, each warning of CUDA's sync debug mode is counted in `counts[(step, site, CUDA_CALL)]` by the
    line `site(frame)` names (default: the user's, copies.user_site), and given `paths` in `paths[(site,
    call_path)]`, not shown; other warnings go on as before. Restores both on exit."""

    def __init__(self, counts: Counter, step: int, site=user_site, paths: Counter | None = None):
        super().__init__()
        self.counts, self.step, self.site, self.paths = counts, step, site, paths

    def __enter__(self):
        super().__enter__()
        warnings.filterwarnings("always", message=f".*{CUDA_WARNING}")
        shown = warnings.showwarning

        def caught(message, category, filename, lineno, file=None, line=None):
            if CUDA_WARNING not in str(message):
                return shown(message, category, filename, lineno, file, line)
            frame = outside(sys._getframe(1), (WARNINGS,))  # the stack that warned, from here out
            where = self.site(frame)
            if where is not None:
                self.counts[(self.step, where, CUDA_CALL)] += 1
                if self.paths is not None:
                    self.paths[(where, call_path(frame))] += 1

        warnings.showwarning = caught
        return self


class HostSync(pl.Callback):
    """Counts, on the sampled `steps` (each moved on to the first step Lightning logs nothing on), the copies to the
    host that code outside torch, Lightning and the harness asks for, by `file:line`; reports the `sites` lines that
    asked most as `host_sync` on global rank 0, an installed library's only where one call path through it copies
    `min_per_step` times a micro-batch. No mode, hook or flag is on during any other step."""

    def __init__(self, steps: list[int] = (3, 7), sites: int = 5, min_per_step: float = 2):
        self.steps, self.sites, self.min_per_step = sorted(set(steps)), sites, min_per_step
        self.counts: Counter = Counter()  # (step, where, call) -> copies
        self.paths: Counter = Counter()  # (where, call path) -> copies, over the sampled steps
        self.batches = 0  # the micro-batches the sampled steps ran
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
        if self.step is not None:
            self.batches += 1  # the watched step's next micro-batch (+trainer.accumulate_grad_batches)
            return
        if not self.due or trainer.global_step < self.due[0]:
            return
        if trainer.log_every_n_steps > 1 and lightning_logs_now(trainer):
            return  # a step that logs copies on purpose: the next one is sampled instead
        self.due.pop(0)
        self.step = trainer.global_step
        self.sampled.append(self.step)
        self.batches += 1
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
        self.mode = CopyCounter(self.counts, paths=self.paths)
        self.mode.step = self.step
        self.mode.__enter__()  # entered before the step's forward, left after its optimizer step: outermost

    def open_cuda(self) -> None:
        self.sync_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")  # each synchronizing call warns, from the stack that made it
        self.catching = SyncWarnings(self.counts, self.step, paths=self.paths)
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
        repeats = repeats_of(self.paths, self.batches)
        self.due, self.sampled, self.counts = [], [], Counter()  # reported once
        self.paths, self.batches = Counter(), 0
        symptoms = host_syncs(counts, sampled, self.sites, repeats, self.min_per_step)
        left = sorted({where for _, where, _ in counts} - {symptom.where for symptom in symptoms})
        if not counts:
            log.info("host_sync: steps %s watched, no copy to the host asked outside the harness", sampled)
        elif left:
            why = f"a library's under min_per_step={self.min_per_step:g} on one call path, or past sites={self.sites}"
            log.info("host_sync: steps %s watched, not named (%s): %s", sampled, why, "; ".join(left))
        for symptom in symptoms:
            if readout is not None:
                readout.report(symptom)
            else:
                log.warning("%s", symptom.line())


def repeats_of(paths: Counter, batches: int) -> dict[str, float]:
    """Each line's copies on its busiest call path a micro-batch, of `paths` ((where, call path) -> copies) over
    `batches` micro-batches: a copy in a loop over layers or tensors repeats on one path, separate calls do not."""
    repeats: dict[str, float] = {}
    for (where, _), count in paths.items():
        repeats[where] = max(repeats.get(where, 0.0), count / max(batches, 1))
    return repeats


def host_syncs(
    counts: Counter,
    sampled: list[int],
    sites: int,
    repeats: dict[str, float] | None = None,
    min_per_step: float = 2,
) -> list[Symptom]:
    """The `host_sync` symptoms of `counts` ((step, where, call) -> copies) over the `sampled` steps, the `sites`
    lines with the most copies first: the user's own lines from one copy a step, an installed library's where it
    makes `min_per_step` copies on one call path a micro-batch (`repeats`, repeats_of; without it, a step)."""
    by_site: dict[str, Counter] = {}
    first: dict[str, int] = {}
    for (step, where, call), count in counts.items():
        by_site.setdefault(where, Counter())[call] += count
        first[where] = min(step, first.get(where, step))
    per_step = {where: sum(calls.values()) / len(sampled) for where, calls in by_site.items()}
    repeats = per_step if repeats is None else repeats
    kept = [w for w in by_site if library_of(w) is None or repeats.get(w, per_step[w]) >= min_per_step]
    ranked = sorted(kept, key=lambda where: -per_step[where])[:sites]
    return [
        _symptom(where, by_site[where], first[where], sampled, repeats.get(where, 0.0)) for where in ranked
    ]


def _symptom(where: str, calls: Counter, step: int, sampled: list[int], repeat: float) -> Symptom:
    """The `host_sync` of line `where`, its `calls` (call -> copies over `sampled`) first seen at `step`; a
    library's with its busiest path's `repeat` and a fix the caller can apply."""
    per_step = sum(calls.values()) / len(sampled)
    kinds = ", ".join(f"{SHOWN.get(call, call)} x{n / len(sampled):g}" for call, n in calls.most_common())
    library, fix, inside = library_of(where), "", ""
    if library is not None:
        asked, _, caller = where.partition(CALLED_FROM)
        fix = LIBRARY_FIX.format(library=library, asked=asked, caller=caller)
        inside = f" inside {library}, {repeat:g} on one call path a micro-batch"
    steps = ", ".join(map(str, sampled))
    detail = (
        f"{per_step:g} copies to the host a training step{inside} ({kinds}; sampled steps {steps}); each makes the "
        "host wait until the device has run everything queued before it"
    )
    return Symptom("host_sync", step, where, per_step, detail, fix)
