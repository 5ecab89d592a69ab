"""Causal attention, written twice.

Axes: b batch, heads attention heads, time (query) / key positions, dim per-head width."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange

from harness.ops.twin import Twin


class CausalAttention(Twin):
    """softmax(q k^T / sqrt(dim)) v, where position t attends to keys 0..t only.

    q, k, v: [b, heads, time, dim] -> [b, heads, time, dim]"""

    test_shapes = (
        {"b": 1, "heads": 1, "time": 1, "dim": 4},
        {"b": 2, "heads": 3, "time": 7, "dim": 5},
        {"b": 3, "heads": 2, "time": 16, "dim": 8},
        {"b": 1, "heads": 4, "time": 33, "dim": 2},
    )
    bench_shape = {"b": 32, "heads": 4, "time": 32, "dim": 16}  # conf defaults, full mode

    def loop(self, q, k, v):
        b, heads, time, dim = q.shape
        rows = []
        for i in range(b):
            for h in range(heads):
                for t in range(time):
                    scores = [q[i, h, t] @ k[i, h, s] / math.sqrt(dim) for s in range(t + 1)]
                    weights = torch.softmax(torch.stack(scores), dim=0)
                    rows.append(sum(weights[s] * v[i, h, s] for s in range(t + 1)))
        return rearrange(rows, "(b heads time) dim -> b heads time dim", b=b, heads=heads)

    def vectorized(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    @classmethod
    def example_inputs(cls, generator, b, heads, time, dim):
        return tuple(torch.randn(b, heads, time, dim, generator=generator) for _ in range(3))
