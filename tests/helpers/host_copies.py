"""Counts what would copy between device and host in each training step, and whose code asked: `HostCopies`, a
callback (`+callbacks.copies._target_=tests.helpers.host_copies.HostCopies +callbacks.copies.path=...`).

On a CPU every such copy is free, so it is counted where it is asked for: a TorchFunctionMode sees `.item()`,
`.tolist()`, `bool(t)`, `float(t)`, `.cpu()`, `nonzero`, mask indexing and `torch.tensor(..., device=...)`."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.overrides import TorchFunctionMode

from harness.compat import lightning_logs_now

#: the calls that wait for the device (or, for torch.tensor with a device, copy host to device)
SYNCS = {"item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy", "nonzero", "tensor"}
HARNESS = str(Path(__file__).resolve().parents[2] / "src" / "harness")
TORCH = str(Path(torch.__file__).parent)


def asker() -> str:
    """`file:line` of the innermost caller outside torch and this helper: the code that asked for the copy."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith(TORCH) or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    where = f"harness/{Path(path).relative_to(HARNESS)}" if path.startswith(HARNESS) else Path(path).name
    return f"{where}:{frame.f_lineno}"


def is_sync(func, args, kwargs) -> bool:
    name = getattr(func, "__name__", "")
    if name == "tensor":
        return kwargs.get("device") is not None
    if name == "__getitem__":
        index = args[1] if len(args) > 1 else None
        return isinstance(index, torch.Tensor) and index.dtype == torch.bool
    return name in SYNCS


class _Counting(TorchFunctionMode):
    def __init__(self, counts: Counter):
        super().__init__()
        self.counts, self.step = counts, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.step is not None and is_sync(func, args, kwargs):
            self.counts[(self.step, asker(), func.__name__)] += 1
        return func(*args, **kwargs)


class HostCopies(pl.Callback):
    """Counts each training step's copies by the code that asked, from its batch's start to the next one's; writes
    {"steps": {step: {where: {call: count}}}, "logged": [steps whose metrics Lightning wrote]} to `path` at the end."""

    def __init__(self, path: str):
        self.path, self.counts, self.logged = Path(path), Counter(), []
        self.mode: _Counting | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.mode = _Counting(self.counts)
        self.mode.__enter__()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.mode.step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if lightning_logs_now(trainer):
            self.logged.append(self.mode.step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.mode.step = None
        self.mode.__exit__(None, None, None)
        steps: dict[int, dict[str, dict[str, int]]] = {}
        for (step, where, call), count in self.counts.items():
            steps.setdefault(step, {}).setdefault(where, {})[call] = count
        self.path.write_text(json.dumps({"steps": steps, "logged": self.logged}))
