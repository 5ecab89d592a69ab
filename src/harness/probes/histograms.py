"""Histograms of every parameter's gradient and weights, every K steps: to TensorBoard and wandb when active,
and as summary statistics (min, max, mean, std, fraction of zeros) to every logger, metrics.csv included.

A few reads of each tensor, all results stacked on the device and moved to the host in one transfer.
Axes: param, stat, bin, value (all parameters' entries, one tensor after another)."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from einops import rearrange
from torch.nn.utils import parameters_to_vector

from harness.probes.emit import MetricSink, due, has_tracker, log_histograms
from harness.probes.gradients import parameter_names

STATS = ("min", "max", "mean", "std", "zero_frac")


def summarize(tensors: list[torch.Tensor], bins: int | None) -> torch.Tensor:
    """Float[param, 7 (+ 2 bins + 1)]: min, max, mean, std (unbiased), zero fraction, sum, sum of squares of
    each (non-empty) tensor, then (if `bins`) its histogram counts over [min, max] and the bin edges.

    About four reads of each tensor (aminmax, mean, deviations, count_nonzero: measured cheaper on CPU than the
    foreach-only route, which allocates more). The std takes two passes (deviations from the mean) rather
    than E[x²] - E[x]², which cancels for weights near 1 (LayerNorm); torch.var_mean would take one but
    runs ~10x slower on CPU. Stays on the device."""
    device = tensors[0].device
    count = torch.tensor([float(t.numel()) for t in tensors], device=device)

    def per_tensor(results) -> torch.Tensor:
        return rearrange(list(results), "param -> param").float()

    lo, hi = (per_tensor(extreme) for extreme in zip(*[torch.aminmax(t) for t in tensors], strict=True))
    floats = [t.float() for t in tensors]  # a no-op for float32
    means = [t.mean() for t in floats]
    mean = per_tensor(means)
    deviation = per_tensor(torch._foreach_norm(torch._foreach_sub(floats, means)))
    std = deviation / (count - 1).clamp_min(1).sqrt()  # unbiased; 0 for a single entry
    zeros = 1 - per_tensor([torch.count_nonzero(t) for t in tensors]) / count
    squares = deviation**2 + count * mean**2
    columns = rearrange([lo, hi, mean, std, zeros, mean * count, squares], "stat param -> param stat")
    if not bins:
        return columns
    values = parameters_to_vector([t.detach() for t in tensors]).float()  # every entry, tensor after tensor
    # value -> tensor
    segment = torch.repeat_interleave(torch.arange(len(tensors), device=device), count.long())
    width = torch.where(hi > lo, hi - lo, 1.0)  # a constant tensor (a bias at init) gets a unit-wide range
    index = ((values - lo[segment]) / width[segment] * bins).long().clamp(0, bins - 1)
    counts = torch.zeros(len(tensors) * bins, device=device).index_add_(
        0, segment * bins + index, torch.ones_like(values)
    )
    edges = lo[:, None] + width[:, None] * torch.linspace(0, 1, bins + 1, device=device)
    return torch.cat([columns, rearrange(counts, "(param bin) -> param bin", bin=bins), edges], dim=1)


class Histograms(pl.Callback):
    """Every `every` steps, at the point the optimizer reads the gradients: `grad_stats/<param>/<stat>` and
    `weight_stats/<param>/<stat>` for every logger, `grad_hist/<param>` and `weight_hist/<param>` histograms
    for TensorBoard and wandb."""

    def __init__(self, sink: MetricSink, every: int, bins: int):
        self.sink, self.every, self.bins = sink, every, bins
        self.named: list = []

    def on_train_start(self, trainer, pl_module) -> None:
        self.named = parameter_names(pl_module)

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if not trainer.is_global_zero or not due(step, self.every):
            return
        entries = [("grad", name, p.grad) for name, p in self.named if p.grad is not None and p.numel()]
        entries += [("weight", name, p.detach()) for name, p in self.named if p.numel()]
        if not entries:
            return
        bins = self.bins if has_tracker(trainer) else None  # the buckets only matter to a tracker
        histograms, metrics = {}, {}
        rows = summarize(
            [t for *_, t in entries], bins
        ).tolist()  # gradients and weights at once: one transfer
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
