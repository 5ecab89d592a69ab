"""`Recompiles`: under compile, a function of the training forward compiled again and again, the `recompiles`
symptom with dynamo's reason (the guard that failed) and what to change; read from dynamo's record of compilations."""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass

import pytorch_lightning as pl
import torch

from harness.compat import LibraryChanged
from harness.report.symptoms import Symptom
from harness.train.perf.copies import shown_path
from harness.train.perf.readout import readout_of

log = logging.getLogger(__name__)

#: what to change, by what dynamo's reason says (the first that matches)
FIXES = (
    (
        "recompile limit",
        "dynamo gave up compiling it (torch._dynamo.config.recompile_limit, once cache_size_limit) and runs it "
        "uncompiled from now on: fix the guard that keeps failing; raising the limit only hides it",
    ),
    (
        "mismatch at index",
        "a dimension changes size between calls: mark it dynamic (torch._dynamo.mark_dynamic(x, dim) before the "
        "call, or compile with dynamic=True), or pad every batch to one shape",
    ),
    (
        "integer attributes",
        "forward reads a Python number that changes every call: keep it out of forward, or hold it in a tensor "
        "(a buffer); torch._dynamo.config.allow_unspec_int_on_nn_module=True makes such attributes dynamic",
    ),
    (
        "check_obj_id",
        "forward reads an object that is replaced between calls (a module, function or tensor made anew): make it "
        "once, in __init__",
    ),
    ("check_type_id", "a value forward reads changes type between calls: keep its type the same"),
    ("grad_mode", "the forward runs under grad and under no_grad: call the compiled forward in one mode"),
    (
        "requires_grad",
        "an input requires grad on some calls only: call the compiled forward with the same inputs",
    ),
    ("dtype", "an input changes dtype between calls (autocast, a cast on some batches): keep it one dtype"),
    ("device", "an input changes device between calls: move every batch to the model's device"),
    (
        "==",
        "forward reads a Python value that changes between calls: pass it as a tensor, or keep it the same",
    ),
)
#: the innermost line of the user's code in dynamo's reason (its "User stack trace")
USER_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass(frozen=True)
class Reason:
    """Dynamo's reason for a compilation, read: the guard that failed, the user's line it reads, what to change."""

    guard: str
    line: str | None
    fix: str


def reason_of(text: str) -> Reason:
    """The guard, line and fix in dynamo's recompile reason (`0/3: self.calls == 3  # self.calls += 1 ...`)."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown"
    guard = re.sub(r"^\d+/\d+: ", "", first).split("  #")[0].strip()  # the guard's comment names its source
    lines = USER_LINE.findall(text)
    line = f"{shown_path(lines[-1][0])}:{lines[-1][1]}" if lines else None
    fix = next(
        (fix for marker, fix in FIXES if marker in text), "make what the guard reads the same every call"
    )
    return Reason(guard, line, fix)


def _compilations() -> list:
    """Dynamo's record of its latest compilations (torch._dynamo.utils.CompilationMetrics), oldest first."""
    # the record TORCH_LOGS=recompiles prints from, kept whatever the logging settings: nothing to switch on
    try:
        from torch._dynamo.utils import get_compilation_metrics

        return get_compilation_metrics()
    except (ImportError, AttributeError) as err:
        what = "torch._dynamo.utils.get_compilation_metrics"
        raise LibraryChanged(f"torch {torch.__version__}: {what} is gone ({err})") from err


def _frame_and_attempt(compile_id) -> tuple[str, int]:
    """("0", 3) of compile id "0/3": the compiled function's number and its compilation's."""
    found = re.search(r"(\d+)/(\d+)", str(compile_id))
    return (found[1], int(found[2])) if found else (str(compile_id), 0)


class Recompiles(pl.Callback):
    """Reads dynamo's compilations at each training step's end (host work only); on global rank 0, a function
    compiled again more than `allowed` times, or once dynamo's recompile limit is hit, is `recompiles`."""

    def __init__(self, allowed: int = 2):
        self.allowed, self.on, self.last = allowed, False, None
        self.again: Counter = Counter()  # compiled function -> compilations after its first
        self.names: dict[str, str] = {}  # compiled function -> `name (file:line)`
        self.reported: set[str] = set()
        self.compiled = 0  # compilations seen while training

    def on_train_start(self, trainer, pl_module) -> None:
        compiled = pl_module.__dict__.get("train_forward", pl_module.model) is not pl_module.model
        self.on = compiled and trainer.is_global_zero
        if self.on:
            records = _compilations()
            self.last = records[-1] if records else None  # what compiled before training is not read

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.on:
            self.read(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.on:
            self.read(trainer)
            again = sum(self.again.values())
            log.info(
                "recompiles: %d compilations while training, %d after a function's first",
                self.compiled,
                again,
            )

    def read(self, trainer) -> None:
        """Judge each compilation recorded since the last look."""
        records = _compilations()
        if not records or records[-1] is self.last:
            return
        start = next((i + 1 for i in range(len(records) - 1, -1, -1) if records[i] is self.last), 0)
        self.last, readout = records[-1], readout_of(trainer)
        for record in records[start:]:
            symptom = self.judge(record, max(trainer.global_step - 1, 0))  # the step that just ran
            if symptom is not None and readout is not None:
                readout.report(symptom)
            elif symptom is not None:  # a Trainer of another task, without the run's readout
                log.warning("%s", symptom.line())

    def judge(self, record, step: int) -> Symptom | None:
        """The symptom `record` (one compilation) completes, or None."""
        function, attempt = _frame_and_attempt(record.compile_id)
        if record.co_name:
            self.compiled += 1
            place = f"{shown_path(record.co_filename or '?')}:{record.co_firstlineno}"
            self.names.setdefault(function, f"{record.co_name} ({place})")
        name = self.names.get(function, f"compiled function {function}")
        reason = reason_of(record.recompile_reason or "")
        if "recompile limit" in (record.fail_reason or ""):
            detail = (
                f"{name} reached dynamo's recompile limit after {attempt} compilations and runs uncompiled from "
                f"now on; the guard that failed last: `{reason.guard}`{f' ({reason.line})' if reason.line else ''}"
            )
            return Symptom("recompiles", step, f"{name}: recompile limit", attempt, detail, FIXES[0][1])
        if attempt == 0 or not record.recompile_reason:
            return None
        self.again[function] += 1
        if self.again[function] <= self.allowed or function in self.reported:
            return None
        self.reported.add(function)
        count = self.again[function]
        detail = (
            f"{name} compiled again {count} times after its first ({self.allowed} allowed: a dimension that "
            f"first changes size costs one); the guard that failed: `{reason.guard}`"
            + (f", reading {reason.line}" if reason.line else "")
        )
        return Symptom("recompiles", step, reason.line or name, count, detail, reason.fix)
