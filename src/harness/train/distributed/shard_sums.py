"""A whole tensor's figures from this rank's shards (trainer=fsdp): `local`, `reduce`, `gathered`, `norms`;
sums over local slices, reduced across ranks in one collective. Unsharded: the plain computation."""

from __future__ import annotations

import torch
import torch.distributed as dist
from einops import rearrange
from torch import nn


def is_shard(tensor) -> bool:
    """Whether `tensor` is a DTensor (a parameter or gradient under FSDP2)."""
    if type(tensor) in (torch.Tensor, nn.Parameter):  # asked for every parameter each step: no import
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def any_sharded(params) -> bool:
    """Whether any of `params` is sharded: then every rank must join each reduction."""
    return any(is_shard(p) for p in params)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `tensor` (the tensor itself when it is not sharded); shares its storage."""
    return tensor.to_local() if is_shard(tensor) else tensor


def reduce(tensor: torch.Tensor, op=None) -> torch.Tensor:
    """All-reduce `tensor` in place across every rank (a sum unless `op`); alone, it is left as it is."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        flat = tensor.contiguous()  # NCCL refuses a view that is not contiguous (a table's column)
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


def sum_dtype(tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype sums over `tensors` accumulate in: float32, float64 where one of them is float64."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def square_sums(tensors: list[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Float64[tensor]: each tensor's sum of squares, in `dtype`, over pieces of PIECE entries."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    pieces, counts = [], []
    for t in tensors:
        split = t.reshape(-1).split(PIECE) if t.numel() > PIECE else (t,)
        pieces += split
        counts.append(len(split))
    accumulate = dtype or sum_dtype(tensors)
    sums = rearrange(list(torch._foreach_powsum(pieces, 2, dtype=accumulate)), "piece -> piece").double()
    if len(pieces) == len(tensors):
        return sums
    # a tensor's pieces lie side by side: each run summed, with no index tensor copied from the host (a copy that
    # waits for the device on every step)
    runs = sums.split(counts)
    return rearrange([run[0] if len(run) == 1 else run.sum() for run in runs], "tensor -> tensor")


def norms(tensors: list[torch.Tensor], shards: bool) -> torch.Tensor:
    """Float[tensor]: each whole tensor's 2-norm; with `shards`, the slices' square sums all-reduced."""
    if not tensors:
        return torch.zeros(0)
    if not shards:
        return square_sums(tensors).sqrt().to(sum_dtype(tensors))
    return reduce(square_sums([local(t) for t in tensors])).sqrt().to(sum_dtype(tensors))


def unwrapped_named_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of `module`, the wrappers' infixes (FSDP1, checkpointing, compile) taken out."""
    infixes = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
    named = []
    for name, p in module.named_parameters():
        for infix in infixes:
            name = name.replace(infix, "")
        named.append((name, p))
    return named
