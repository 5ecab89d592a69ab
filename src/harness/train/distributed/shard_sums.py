"""Whole tensors from shards: what the guard and the probes read of a parameter under sharding (trainer=fsdp).

Under FSDP2 each parameter (and its gradient) is a DTensor of which this rank holds one slice of the first
dimension (`to_local()`, empty where the tensor has fewer rows than there are ranks). A norm of the slice is not
the layer's norm, so every figure is computed as sums over the local slices (sums of squares, counts, extremes),
packed into one tensor and reduced across ranks in one collective, then finished (a square root, a mean).
Without sharding every function here is the plain computation, and touches no process group."""

from __future__ import annotations

import torch
import torch.distributed as dist
from einops import rearrange
from torch import nn


def is_shard(tensor) -> bool:
    """Whether `tensor` is a DTensor (a parameter or gradient under FSDP2). A plain tensor or parameter is told
    by its type alone: the probes ask for every parameter each step, and the import costs microseconds a call."""
    if type(tensor) in (torch.Tensor, nn.Parameter):
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def sharded(params) -> bool:
    """Whether any of `params` is sharded: then every rank must take part in each reduction below."""
    return any(is_shard(p) for p in params)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `tensor` (the tensor itself when it is not sharded); shares its storage."""
    return tensor.to_local() if is_shard(tensor) else tensor


def reduce(tensor: torch.Tensor, op=None) -> torch.Tensor:
    """All-reduce `tensor` in place across every rank (a sum unless `op`), or leave it when alone. A view that is
    not contiguous (a column of a table) goes through a contiguous copy: NCCL refuses it, gloo does not."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        flat = tensor.contiguous()
        dist.all_reduce(flat, op=op or dist.ReduceOp.SUM)
        if flat is not tensor:
            tensor.copy_(flat)
    return tensor


def gathered(rows: torch.Tensor) -> torch.Tensor:
    """[rank, ...]: `rows` of every rank, stacked (one all-gather); [1, ...] when alone."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return rows[None]
    parts = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, rows.contiguous())
    return rearrange(parts, "rank ... -> rank ...")


#: entries summed in one piece: torch's CPU reductions of squares (_foreach_norm, _foreach_powsum, vector_norm)
#: accumulate a float32 tensor in float32 lanes, 0.5% off at 38M entries (GPT-2's embedding); in pieces of this
#: size, their sums added in float64, 3e-7, at the same speed
PIECE = 1 << 16


def accumulator(tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype sums over `tensors` accumulate in: float32, float64 where one of them is float64."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def square_sums(tensors: list[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Float64[tensor]: the sum of the squares of each tensor's entries, one torch._foreach_powsum over pieces of at
    most PIECE entries (a tensor that large split into views), accumulated in `dtype` (default: accumulator()),
    the pieces' sums added in float64."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    device = tensors[0].device
    pieces, owners = [], []
    for i, t in enumerate(tensors):
        split = t.reshape(-1).split(PIECE) if t.numel() > PIECE else (t,)
        pieces += split
        owners += [i] * len(split)
    accumulate = dtype or accumulator(tensors)
    sums = rearrange(list(torch._foreach_powsum(pieces, 2, dtype=accumulate)), "piece -> piece").double()
    if len(pieces) == len(tensors):
        return sums
    owner = torch.tensor(owners, device=device)
    return torch.zeros(len(tensors), dtype=torch.float64, device=device).index_add_(0, owner, sums)


def norms(tensors: list[torch.Tensor], shards: bool) -> torch.Tensor:
    """Float[tensor]: the 2-norm of each whole tensor (float32; float64 where one is float64), from square_sums
    (one torch._foreach_powsum); under sharding (`shards`) the local slices' sums of squares added across ranks in
    one all-reduce (in float64)."""
    if not tensors:
        return torch.zeros(0)
    if not shards:
        return square_sums(tensors).sqrt().to(accumulator(tensors))
    return reduce(square_sums([local(t) for t in tensors])).sqrt().to(accumulator(tensors))


def names_of(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of `module`, the names as the model itself gives them: FSDP2 and the composable
    activation checkpointing keep them; a wrapper's infix (`_fsdp_wrapped_module.`, `_checkpoint_wrapped_module.`,
    `_orig_mod.`, from FSDP1, wrapper-style checkpointing and torch.compile) is taken out."""
    infixes = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
    named = []
    for name, p in module.named_parameters():
        for infix in infixes:
            name = name.replace(infix, "")
        named.append((name, p))
    return named
