"""What runs inside a forward pass: which module's forward is running (`ModuleStack`, kept by hooks), and the torch
functions called in it (`Intercept`, a TorchFunctionMode routing chosen functions to a handler).

Module hooks see only modules: `torch.relu`, `F.softmax` or `F.dropout` called inside a forward are invisible to
them. The checks (attention weights), the activations probe (activations written as functions) and the overfit
verdict (train mode with dropout off) see those calls through these two, and only while they are active."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

#: the functions that drop units at random; scaled_dot_product_attention's own dropout is its `dropout_p`
DROPOUTS = (
    F.dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.alpha_dropout,
    F.feature_alpha_dropout,
    torch.dropout,
    torch.alpha_dropout,
    torch.feature_dropout,
)
SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def argument(args: tuple, kwargs: dict, index: int, name: str, default=None):
    """A call's argument given by position `index` or keyword `name`."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


class ModuleStack:
    """Which module's forward is running, while entered: forward pre- and post-hooks on every module of `model`
    push and pop its name. `current` is that name ("" for the model's own forward), or None outside the
    model's forward (a loss, an optimizer)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.names: list[str] = []
        self.handles: list = []

    @property
    def current(self) -> str | None:
        return self.names[-1] if self.names else None

    def __enter__(self) -> ModuleStack:
        def push(name: str):
            return lambda module, args: self.names.append(name)

        def pop(module, args, output):
            if self.names:
                self.names.pop()

        for name, module in self.model.named_modules():
            self.handles.append(module.register_forward_pre_hook(push(name)))
            self.handles.append(
                module.register_forward_hook(pop, always_call=True)
            )  # a forward that raised too
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles, self.names = [], []


class Intercept(TorchFunctionMode):
    """While active, a call of a torch function that `handlers` holds runs `handlers[func](func, args, kwargs)`
    instead (which may call `func` itself: inside the handler this mode is off); every other call runs as it
    is. Costs a Python call per torch call while active: enter it only for the forward that is watched."""

    def __init__(self, handlers: dict[Callable, Callable]):
        super().__init__()
        self.handlers = handlers

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        return func(*args, **kwargs) if handler is None else handler(func, args, kwargs)


def without_dropout(rates: list[float]) -> Intercept:
    """A mode in which every dropout (the functions above, and scaled_dot_product_attention's dropout_p) keeps
    every unit: train mode then differs from eval mode only by what is not dropout. The rate each call would
    have dropped at is appended to `rates`."""

    def identity(func, args, kwargs):
        if argument(args, kwargs, 2, "training", argument(args, kwargs, 2, "train", True)):
            rates.append(float(argument(args, kwargs, 1, "p", 0.5)))
        return args[0] if args else kwargs["input"]

    def attention(func, args, kwargs):
        values = {**dict(zip(SDPA_ARGS, args, strict=False)), **kwargs}
        rates.append(float(values.get("dropout_p") or 0.0))
        return func(**{**values, "dropout_p": 0.0})

    return Intercept({**dict.fromkeys(DROPOUTS, identity), F.scaled_dot_product_attention: attention})
