"""A twin a fork might write: a causal depthwise convolution over time, once as the spec, once fast.

Axes: b batch, time positions, channels features (each convolved with its own kernel)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from harness.ops import Twin


class CausalConv(Twin):
    """out[b, t, c] = sum_k weight[c, k] * x[b, t - k, c] over k = 0..kernel-1, with x = 0 before t = 0.

    x: [b, time, channels], weight: [channels, kernel] -> [b, time, channels]. Being a Twin subclass is
    its registration: the preflight `twins` check and the twin tests find it once its module is imported."""

    test_shapes = (
        {"b": 1, "time": 1, "channels": 1, "kernel": 1},
        {"b": 2, "time": 7, "channels": 3, "kernel": 3},
        {"b": 3, "time": 16, "channels": 8, "kernel": 5},
        {"b": 2, "time": 2, "channels": 4, "kernel": 6},
    )
    bench_shape = {"b": 32, "time": 32, "channels": 64, "kernel": 4}

    def loop(self, x, weight):
        rows = []
        for i in range(x.shape[0]):
            for t in range(x.shape[1]):
                total = torch.zeros_like(x[i, t])
                for k in range(min(weight.shape[1], t + 1)):  # taps before t = 0 read zeros: skip them
                    total = total + weight[:, k] * x[i, t - k]
                rows.append(total)
        return rearrange(rows, "(b time) channels -> b time channels", b=x.shape[0])

    def vectorized(self, x, weight):
        kernel = weight.shape[1]
        channels_first = rearrange(x, "b time channels -> b channels time")
        padded = F.pad(channels_first, (kernel - 1, 0))  # zeros on the left only: nothing from the future
        # conv1d correlates (no flip), so tap k of `weight` must meet x[t - k]: reverse the taps
        taps = rearrange(weight.flip(1), "channels kernel -> channels 1 kernel")
        out = F.conv1d(padded, taps, groups=x.shape[2])
        return rearrange(out, "b channels time -> b time channels")

    @classmethod
    def example_inputs(cls, generator, b, time, channels, kernel):
        return torch.randn(b, time, channels, generator=generator), torch.randn(
            channels, kernel, generator=generator
        )
