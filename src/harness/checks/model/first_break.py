"""first_break: where a property breaks, as the first module whose output differs between two inputs on a
region (earlier positions, other examples) while its inputs there agree. Tensors whose batch and time axes
cannot be read are not judged."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _tensors_in(value) -> list[torch.Tensor]:
    """The tensors in a module's inputs or output: a tensor, or tuples, lists and dicts of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


def time_axis(shape: torch.Size, batch: int, time: int) -> int | None:
    """The axis of `shape` that is time (the first after axis 0 of size `time`), for a tensor whose axis 0 is
    the batch; None if none."""
    if len(shape) < 2 or shape[0] != batch:
        return None
    return next((axis for axis in range(1, len(shape)) if shape[axis] == time), None)


def positions_up_to(t: int) -> Callable:
    """The region of positions 0..t of every example."""

    def region(x: torch.Tensor, batch: int, time: int):
        axis = time_axis(x.shape, batch, time)
        return None if axis is None else x.narrow(axis, 0, t + 1)

    return region


def examples_region(rows: list[int]) -> Callable:
    """The region of the examples `rows`."""

    def region(x: torch.Tensor, batch: int, time: int):
        return x[rows] if x.dim() >= 1 and x.shape[0] == batch else None

    return region


def _agree_on(
    a: list[torch.Tensor], b: list[torch.Tensor], region: Callable, batch: int, time: int
) -> bool | None:
    """Whether `a` and `b` agree on `region` (None: no tensor of them can be read); a region maps (tensor,
    batch size, time) to the part the property protects, or None."""
    verdicts = []
    for x, y in zip(a, b, strict=False):
        if x.shape != y.shape:
            continue
        x_in, y_in = region(x, batch, time), region(y, batch, time)
        if x_in is not None:
            verdicts.append(bool(torch.equal(x_in, y_in)))
    return all(verdicts) if verdicts else None


def _record_calls(model: nn.Module, run: Callable[[], object]) -> list[tuple[str, list, list]]:
    """(module name, input tensors, output tensors) of every module call of `run()`, in the order calls end."""
    calls: list[tuple[str, list, list]] = []

    def watch(name: str):
        def hook(module, args, kwargs, output):
            ins, outs = _tensors_in((args, kwargs)), _tensors_in(output)
            calls.append((name, [t.detach() for t in ins], [t.detach() for t in outs]))

        return hook

    handles = [
        m.register_forward_hook(watch(name), with_kwargs=True) for name, m in model.named_modules() if name
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return calls


def first_break(
    model: nn.Module, forward: Callable, ids_a: torch.Tensor, ids_b: torch.Tensor, region: Callable
) -> str:
    """A phrase naming where outputs on `ids_a` and `ids_b` first differ on `region`: the first module whose
    output differs there while its inputs agree."""
    batch, time = ids_a.shape
    calls_a = _record_calls(model, lambda: forward(ids_a))
    calls_b = _record_calls(model, lambda: forward(ids_b))
    if [c[0] for c in calls_a] != [c[0] for c in calls_b]:
        return "the two inputs took different paths through the modules"
    first_dirty_input = None  # (module name, whether what differs is the ids themselves)
    for (name, ins_a, outs_a), (_, ins_b, outs_b) in zip(calls_a, calls_b, strict=True):
        inputs_agree = _agree_on(ins_a, ins_b, region, batch, time)
        outputs_agree = _agree_on(outs_a, outs_b, region, batch, time)
        if inputs_agree is False and first_dirty_input is None:
            ids_differ = (
                _agree_on(
                    [t for t in ins_a if not t.is_floating_point()],
                    [t for t in ins_b if not t.is_floating_point()],
                    region,
                    batch,
                    time,
                )
                is False
            )
            first_dirty_input = (name, ids_differ)
        if inputs_agree is not False and outputs_agree is False:
            kind = type(model.get_submodule(name)).__name__
            return f"first seen at the output of {name!r} ({kind}), whose inputs there are unchanged"
    if first_dirty_input is None:
        return "in forward's own code, outside every module"
    name, ids_differ = first_dirty_input
    if ids_differ:
        return (
            f"already in the token ids {name!r} receives: forward's own code mixes input_ids before any "
            "module (a shift or roll of the ids, or a second path from them)"
        )
    return (
        f"in forward's own code between modules: {name!r} already receives inputs that differ there, "
        "though no module before it produced a difference (a function call between modules does it)"
    )
