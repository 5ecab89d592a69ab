"""What copies between device and host, and whose code asked: `CopyCounter`, a TorchFunctionMode that counts the
calls which wait for the device (`.item()`, `bool(t)`, mask indexing, ...) by the `file:line` a `site` function names."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import lightning_fabric
import pytorch_lightning as pl
import torch
from torch.overrides import TorchFunctionMode

#: the calls that wait for the device (or, for torch.tensor with a device, copy host to device)
SYNCS = {"item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy", "nonzero", "tensor"}
#: how each call reads in a symptom
SHOWN = {
    "item": ".item()",
    "tolist": ".tolist()",
    "__bool__": "bool(t)",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "cpu": ".cpu()",
    "numpy": ".numpy()",
    "nonzero": "nonzero",
    "__getitem__": "t[mask]",
    "tensor": "torch.tensor(..., device=)",
}
TORCH = f"{Path(torch.__file__).parent}{os.sep}"  # the separator: not torchvision's
HARNESS = f"{Path(__file__).resolve().parents[2]}{os.sep}"  # src/harness/
#: whose copies are not the user's: the harness's own (held to none on quiet steps by its tests) and Lightning's
NOT_USERS = (HARNESS, *(f"{Path(package.__file__).parent}{os.sep}" for package in (pl, lightning_fabric)))


def _is_sync(func, args, kwargs) -> bool:
    """Whether the torch call `func(*args, **kwargs)` waits for the device (SYNCS, a boolean mask index)."""
    name = getattr(func, "__name__", "")
    if name == "tensor":
        return kwargs.get("device") is not None
    if name == "__getitem__":
        index = args[1] if len(args) > 1 else None
        return isinstance(index, torch.Tensor) and index.dtype == torch.bool
    return name in SYNCS


def outside(frame: FrameType | None, skipped: tuple[str, ...]) -> FrameType | None:
    """The innermost frame from `frame` out whose file is under none of the folders `skipped`."""
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
    return frame


def shown_path(path: str) -> str:
    """`path` as imported: relative to the longest entry of sys.path that holds it, else whole."""
    roots = [root for root in sys.path if root and path.startswith(root.rstrip(os.sep) + os.sep)]
    return path[len(max(roots, key=len)) :].lstrip(os.sep) if roots else path


def _installed(path: str) -> bool:
    """Whether `path` is a file of an installed package (site-packages), not the project's own."""
    return ("site-packages" in path or "dist-packages" in path) and not path.startswith(HARNESS)


def user_site(frame: FrameType | None) -> str | None:
    """`file:line` of the code that asked, from `frame` out: the innermost frame outside torch and the installed
    libraries (a library's copy is named by the line that called into it: the one a user can change); None where
    that is the harness's or Lightning's own."""
    frame = outside(frame, (TORCH,))
    while frame is not None and _installed(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith(NOT_USERS):
        return None
    return f"{shown_path(frame.f_code.co_filename)}:{frame.f_lineno}"


class CopyCounter(TorchFunctionMode):
    """While on, counts each call that waits for the device in `counts[(step, site, call)]`, `site(frame)` naming
    the caller (None: not counted); counts nothing while `step` is None."""

    def __init__(self, counts: Counter, site: Callable[[FrameType | None], str | None] = user_site):
        super().__init__()
        self.counts, self.site = counts, site
        self.step: int | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.step is not None and _is_sync(func, args, kwargs):
            where = self.site(sys._getframe(1))  # the caller; torch's own frames are walked past by `site`
            if where is not None:
                self.counts[(self.step, where, func.__name__)] += 1
        return func(*args, **kwargs)
