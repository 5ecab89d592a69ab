"""What copies between device and host, and whose code asked: `CopyCounter`, a TorchFunctionMode that counts the
calls which wait for the device (`.item()`, `bool(t)`, mask indexing, ...) by the `file:line` a `site` function names
(`user_site`: the user's line, or an installed library's and the line that called it), and by call path."""

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
#: src/harness/ as its frames name it: the path imported, which differs from HARNESS in a checkout under a link
OWN = tuple({HARNESS, f"{Path(__file__).parents[2]}{os.sep}"})
LIGHTNING = tuple(f"{Path(package.__file__).parent}{os.sep}" for package in (pl, lightning_fabric))
#: whose copies are not the user's: the harness's own (held to none on quiet steps by its tests) and Lightning's
NOT_USERS = (*OWN, *LIGHTNING)
#: the harness's models: a library they call copies for the model, as a fork's would (harness.models.hf_causal_lm)
MODELS = tuple(f"{own}models{os.sep}" for own in OWN)
#: how a library's copy is named: the library's line, then the line outside every library that called into it
CALLED_FROM = ", called from "


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
    return ("site-packages" in path or "dist-packages" in path) and not path.startswith(OWN)


def _line(frame: FrameType) -> str:
    return f"{shown_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def user_site(frame: FrameType | None) -> str | None:
    """Who asked, from `frame` out past torch: the user's `file:line`; for an installed library's copy,
    `library_line, called from caller_line` (the caller: the first frame out of the libraries, the user's or a
    harness model wrapper's); None where the asker is the harness or Lightning, or Lightning or the harness outside
    its models called the library."""
    frame = outside(frame, (TORCH,))
    if frame is None or frame.f_code.co_filename.startswith(NOT_USERS):
        return None
    if not _installed(frame.f_code.co_filename):
        return _line(frame)
    caller = frame
    while caller is not None and _installed(caller.f_code.co_filename):
        if caller.f_code.co_filename.startswith(LIGHTNING):  # Lightning's own use of the library
            return None
        caller = caller.f_back
    if (
        caller is None
        or caller.f_code.co_filename.startswith(OWN)
        and not caller.f_code.co_filename.startswith(MODELS)
    ):
        return None  # the harness's own use of the library (a probe's, a check's): not the model's
    return f"{_line(frame)}{CALLED_FROM}{_line(caller)}"


def library_of(where: str) -> str | None:
    """The installed library a `user_site` name says copied (`transformers` of `transformers/masking_utils.py:761,
    called from ...`); None for the user's own line."""
    asked, called, _ = where.partition(CALLED_FROM)
    path = asked.rpartition(":")[0].replace(os.sep, "/")
    return path.split("/")[0].removesuffix(".py") if called else None


def call_path(frame: FrameType | None) -> int:
    """The stack from `frame` out, as one number: copies made again on the same path are a loop's (a layer's, a
    tensor's), copies on different paths separate calls."""
    lines = []
    while frame is not None:
        lines.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return hash(tuple(lines))


class CopyCounter(TorchFunctionMode):
    """While on, counts each call that waits for the device in `counts[(step, site, call)]`, `site(frame)` naming
    the caller (None: not counted), and, given `paths`, in `paths[(site, call_path)]`; counts nothing while `step`
    is None."""

    def __init__(
        self,
        counts: Counter,
        site: Callable[[FrameType | None], str | None] = user_site,
        paths: Counter | None = None,
    ):
        super().__init__()
        self.counts, self.site, self.paths = counts, site, paths
        self.step: int | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.step is not None and _is_sync(func, args, kwargs):
            frame = sys._getframe(1)  # the caller; torch's own frames are walked past by `site`
            where = self.site(frame)
            if where is not None:
                self.counts[(self.step, where, func.__name__)] += 1
                if self.paths is not None:
                    self.paths[(where, call_path(frame))] += 1
        return func(*args, **kwargs)
