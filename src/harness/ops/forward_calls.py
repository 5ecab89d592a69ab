"""What runs inside a forward: which module's forward is running (ModuleStack, by hooks) and the torch
functions called in it, which module hooks cannot see (Intercept: `F.softmax`, `torch.relu`, `F.dropout`);
`without_dropout` keeps every unit."""

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


def call_argument(args: tuple, kwargs: dict, index: int, name: str, default=None):
    """A call's argument given by position `index` or keyword `name`."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


class ModuleStack:
    """Which module's forward is running, while entered (hooks push and pop names): `current` is that name (""
    for the model's own forward; None outside it)."""

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
    """While active, a call of a torch function in `handlers` runs `handlers[func](func, args, kwargs)`
    instead (this mode off inside it); enter it only for a watched forward."""

    def __init__(self, handlers: dict[Callable, Callable]):
        super().__init__()
        self.handlers = handlers

    def __torch_function__(self, func, types, args=(), kwargs=None):  # a Python call per torch call
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        return func(*args, **kwargs) if handler is None else handler(func, args, kwargs)


def without_dropout(rates: list[float]) -> Intercept:
    """A mode in which every dropout (DROPOUTS, scaled_dot_product_attention's dropout_p) keeps every unit;
    each call's rate is appended to `rates`."""

    # train mode then differs from eval mode only by what is not dropout
    def identity(func, args, kwargs):
        if call_argument(args, kwargs, 2, "training", call_argument(args, kwargs, 2, "train", True)):
            rates.append(float(call_argument(args, kwargs, 1, "p", 0.5)))
        return args[0] if args else kwargs["input"]

    def attention(func, args, kwargs):
        values = {**dict(zip(SDPA_ARGS, args, strict=False)), **kwargs}
        rates.append(float(values.get("dropout_p") or 0.0))
        return func(**{**values, "dropout_p": 0.0})

    return Intercept({**dict.fromkeys(DROPOUTS, identity), F.scaled_dot_product_attention: attention})
