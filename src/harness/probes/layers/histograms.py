"""`Histograms` of every parameter's gradient and weights: buckets to TensorBoard and wandb, min, max, mean,
std and zero fraction to every logger. Axes: param, stat, bin, end."""

from __future__ import annotations

import math

import torch
from einops import rearrange

from harness.config.groups.probes import HistogramsKeys
from harness.probes.layers.norms import parameter_names
from harness.probes.probe import Probe, checked_declared
from harness.probes.trackers import has_tracker, log_histograms
from harness.train.distributed.shard_sums import any_sharded, gathered, local, reduce, square_sums, sum_dtype

STATS = ("min", "max", "mean", "std", "zero_frac")
#: a tensor whose sums leave its variance below this share of its mean square (its mean large against its spread,
#: where E[x²] - E[x]² cancels: a trained LayerNorm gain near 1, a constant) is summed again in float64
CANCELS = 0.1


def _sums_and_squares(tensors: list[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Float64[param, 2]: each tensor's sum and sum of squares, accumulated in `dtype` (default: sum_dtype)."""
    dtype = dtype or sum_dtype(tensors)
    total = rearrange([t.sum(dtype=dtype) for t in tensors], "param -> param").double()
    return rearrange([total, square_sums(tensors, dtype)], "stat param -> param stat")


def _slice_stats(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Float64[param, 6]: min, max, sum, sum of squares, nonzeros and entries of each tensor (slice)."""
    device = tensors[0].device

    def per_tensor(results) -> torch.Tensor:
        return rearrange(list(results), "param -> param").double()

    def extremes(t: torch.Tensor) -> tuple:
        if t.numel():
            return torch.aminmax(t)
        return tuple(torch.tensor(end, dtype=t.dtype, device=device) for end in (math.inf, -math.inf))

    # float32 sums are pairwise (~1e-7 relative); float64 costs 5-17x on the CPU: exact_sums redoes only where needed
    lo, hi = (per_tensor(extreme) for extreme in zip(*[extremes(t) for t in tensors], strict=True))
    total, squares = rearrange(_sums_and_squares(tensors), "param stat -> stat param")
    nonzero = per_tensor([torch.count_nonzero(t) for t in tensors])
    count = torch.tensor([float(t.numel()) for t in tensors], dtype=torch.float64, device=device)
    return rearrange([lo, hi, total, squares, nonzero, count], "stat param -> param stat")


def _exact_sums(stats: torch.Tensor, tensors: list[torch.Tensor], shards: bool) -> torch.Tensor:
    """`stats` with the float32 sums that cancel (CANCELS) redone in float64 (one sync)."""
    _, _, total, squares, _, count = rearrange(stats, "param stat -> stat param")
    spread = squares - total * total / count  # n · the biased variance
    redo = (spread < CANCELS * squares).nonzero()[:, 0].tolist()
    if not redo:
        return stats
    again = _sums_and_squares([tensors[i] for i in redo], torch.float64)
    if shards:
        again = reduce(again)
    stats = stats.clone()
    stats[redo, 2:4] = again
    return stats


def _across_ranks(stats: torch.Tensor) -> torch.Tensor:
    """_slice_stats of every rank combined into the whole tensors' (one all-gather): least min, greatest max,
    sums."""
    every = gathered(stats)  # [rank, param, stat]
    return torch.cat([every[..., 0:1].amin(0), every[..., 1:2].amax(0), every[..., 2:].sum(0)], dim=1)


def summarize(tensors: list[torch.Tensor], bins: int | None, shards: bool = False) -> torch.Tensor:
    """Float[param, 7 (+ 2 bins + 1)]: min, max, mean, std, zero fraction, sum, sum of squares, then counts
    and edges; with `shards`, the whole tensors'."""
    device = tensors[0].device
    stats = _slice_stats(tensors)
    if shards:
        stats = _across_ranks(stats)
    stats = _exact_sums(stats, tensors, shards)
    lo, hi, total, squares, nonzero, count = rearrange(stats, "param stat -> stat param")
    mean = total / count
    variance = ((squares - total * mean) / (count - 1).clamp_min(1)).clamp_min(0)  # unbiased; 0 for one entry
    zeros = 1 - nonzero / count
    columns = rearrange([lo, hi, mean, variance.sqrt(), zeros, total, squares], "stat param -> param stat")
    columns = columns.float()
    if not bins:
        return columns
    lo, hi = lo.float(), hi.float()  # histc needs its range on the host: one sync
    width = torch.where(hi > lo, hi - lo, 1.0)  # a constant tensor (a bias at init) gets a unit-wide range
    ranges = [  # [min, max] exactly (min + width can round below max: the top entry would fall out)
        (low, high if high > low else low + max(1.0, abs(low))) if math.isfinite(low + high) else (0.0, 1.0)
        for low, high in rearrange([lo, hi], "end param -> param end").tolist()
    ]  # a constant tensor: a unit-wide range from its value; a NaN or inf: counts 0
    counts = [torch.histc(t.float(), bins, low, high) for t, (low, high) in zip(tensors, ranges, strict=True)]
    counts = rearrange(counts, "param bin -> param bin")
    if shards:
        counts = reduce(counts)  # every rank's slice counted over the same buckets: summed
    edges = lo[:, None] + width[:, None] * torch.linspace(0, 1, bins + 1, device=device)
    return torch.cat([columns, counts, edges], dim=1)


class Histograms(Probe):
    """`grad_stats/` and `weight_stats/` for every logger, `grad_hist/` and `weight_hist/` for the trackers."""

    def __init__(self, every: int | None = 100, bins: int = 64):
        super().__init__(every)
        self.bins = checked_declared(HistogramsKeys, "bins", bins)
        self.named: list = []
        self.sharded = False

    def on_train_start(self, trainer, pl_module) -> None:
        self.named = parameter_names(pl_module)
        self.sharded = any_sharded(p for _, p in self.named)  # then every rank takes part, rank 0 logs

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if not (trainer.is_global_zero or self.sharded) or not self.due(step):
            return
        entries = [
            ("grad", name, local(p.grad)) for name, p in self.named if p.grad is not None and p.numel()
        ]
        entries += [("weight", name, local(p.detach())) for name, p in self.named if p.numel()]
        if not entries:
            return
        bins = self.bins if has_tracker(trainer) else None  # the buckets only matter to a tracker
        histograms, metrics = {}, {}
        # gradients and weights at once: one transfer (and under sharding one gather, one sum of the counts)
        rows = summarize([t for *_, t in entries], bins, self.sharded).tolist()
        if not trainer.is_global_zero:
            return
        for (kind, name, _), row in zip(entries, rows, strict=True):
            metrics.update({f"{kind}_stats/{name}/{stat}": row[i] for i, stat in enumerate(STATS)})
            if bins:
                counts = row[7 : 7 + bins]
                histograms[f"{kind}_hist/{name}"] = {
                    "min": row[0],
                    "max": row[1],
                    "num": int(sum(counts)),
                    "sum": row[5],
                    "sum_squares": row[6],
                    "counts": counts,
                    "edges": row[7 + bins :],
                }
        self.sink.add(step, metrics)
        if histograms:
            log_histograms(trainer, histograms, step)
