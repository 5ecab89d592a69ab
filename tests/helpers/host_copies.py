"""Counts what would copy between device and host in each training step, and whose code asked: `HostCopies`, a
callback (`+callbacks.copies._target_=tests.helpers.host_copies.HostCopies +callbacks.copies.path=...`). On a CUDA
device it counts what CUDA's sync debug mode catches instead (scripts/gpu_check.sh).

On a CPU every such copy is free, so it is counted where it is asked for: the harness's counter
(harness.train.perf.copies.CopyCounter, a TorchFunctionMode that sees `.item()`, `.tolist()`, `bool(t)`, `float(t)`,
`.cpu()`, `nonzero`, mask indexing and `torch.tensor(..., device=...)`), here naming the harness's own copies too."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytorch_lightning as pl
import torch

from harness.compat import lightning_logs_now
from harness.train.perf.copies import HARNESS, TORCH, CopyCounter, outside
from harness.train.perf.host_sync import SyncWarnings


def asker(frame) -> str:
    """`file:line` of the innermost caller outside torch, from `frame` out: the code that asked for the copy (the
    harness's own named as harness/...)."""
    frame = outside(frame, (TORCH, __file__))
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    where = f"harness/{Path(path).relative_to(HARNESS)}" if path.startswith(HARNESS) else Path(path).name
    return f"{where}:{frame.f_lineno}"


class _Counting(CopyCounter):
    """The copies of each step by whoever asked, the harness included."""

    def __init__(self, counts: Counter):
        super().__init__(counts, site=asker)


class HostCopies(pl.Callback):
    """Counts each training step's copies by the code that asked, from its batch's start to the next one's; writes
    {"steps": {step: {where: {call: count}}}, "logged": [steps whose metrics Lightning wrote]} to `path` at the end."""

    def __init__(self, path: str):
        self.path, self.counts, self.logged = Path(path), Counter(), []
        self.mode: _Counting | None = None
        self.cuda, self.catching, self.previous = False, None, 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.cuda = pl_module.device.type == "cuda"
        if self.cuda:  # the copies CUDA itself sees, each step under its own catch
            self.previous, self.catching = torch.cuda.get_sync_debug_mode(), None
            torch.cuda.set_sync_debug_mode("warn")
            return
        self.mode = _Counting(self.counts)
        self.mode.__enter__()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.cuda:
            self.mode.step = trainer.global_step
            return
        if self.catching is not None:
            self.catching.__exit__(None, None, None)
        self.catching = SyncWarnings(self.counts, trainer.global_step, site=asker)
        self.catching.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if lightning_logs_now(trainer):
            self.logged.append(trainer.global_step - 1 if self.cuda else self.mode.step)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.cuda:
            if self.catching is not None:
                self.catching.__exit__(None, None, None)
            torch.cuda.set_sync_debug_mode(self.previous)
        else:
            self.mode.step = None
            self.mode.__exit__(None, None, None)
        steps: dict[int, dict[str, dict[str, int]]] = {}
        for (step, where, call), count in self.counts.items():
            steps.setdefault(step, {}).setdefault(where, {})[call] = count
        self.path.write_text(json.dumps({"steps": steps, "logged": self.logged}))


def harness_copies(copies: dict, steps: range) -> list[str]:
    """What the harness's own code copied against its rule, from a HostCopies file's `copies`, over `steps`: nothing
    on a step that logs nothing, at most one copy (the readout's) on a logging step."""
    wrong = []
    for step in steps:
        asked = Counter()
        for where, calls in copies["steps"].get(str(step), {}).items():
            if where.startswith("harness/"):
                asked[where] += sum(calls.values())
        allowed = 1 if step in copies["logged"] else 0
        if sum(asked.values()) > allowed or (asked and not all("perf/readout.py" in w for w in asked)):
            wrong.append(f"step {step} ({'logging' if allowed else 'quiet'}): {dict(asked)}")
    return wrong


if (
    __name__ == "__main__"
):  # python -m tests.helpers.host_copies COPIES.json STEPS: exits 1 naming what broke it
    counted = json.loads(Path(sys.argv[1]).read_text())
    broken = harness_copies(counted, range(1, int(sys.argv[2]) - 1))
    print(
        "\n".join(broken) or f"no copy of the harness's own outside its rule, steps 1-{int(sys.argv[2]) - 2}"
    )
    sys.exit(1 if broken else 0)
