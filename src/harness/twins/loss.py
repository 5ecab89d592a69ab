"""The masked cross entropy every task trains on, written twice.

Axes: b batch, time positions, vocab classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from harness.twins.base import Twin


class MaskedCrossEntropy(Twin):
    """Mean of -log softmax(logits[b, t])[targets[b, t]] over the positions where loss_mask is true.

    logits: [b, time, vocab], targets: Long[b, time], loss_mask: Bool[b, time] -> scalar"""

    test_shapes = (
        {"b": 1, "time": 1, "vocab": 2},
        {"b": 2, "time": 5, "vocab": 7},
        {"b": 4, "time": 16, "vocab": 20},
        {"b": 3, "time": 9, "vocab": 100},
    )
    bench_shape = {"b": 32, "time": 32, "vocab": 103}  # data=text defaults, full mode

    def loop(self, logits, targets, loss_mask):
        terms = []
        for i in range(logits.shape[0]):
            for t in range(logits.shape[1]):
                if loss_mask[i, t]:
                    terms.append(-torch.log_softmax(logits[i, t], dim=0)[targets[i, t]])
        return torch.stack(terms).mean()

    def vectorized(self, logits, targets, loss_mask):
        # a target outside the mask may be anything (-100, a pad id past the vocabulary): never read, as in loop
        targets = torch.where(loss_mask, targets, torch.zeros_like(targets))
        per_position = F.cross_entropy(
            rearrange(logits, "b time vocab -> (b time) vocab"),
            rearrange(targets, "b time -> (b time)"),
            reduction="none",
        )
        mask = rearrange(loss_mask, "b time -> (b time)").to(per_position.dtype)
        return (per_position * mask).sum() / mask.sum()

    @classmethod
    def example_inputs(cls, generator, b, time, vocab):
        logits = torch.randn(b, time, vocab, generator=generator) * 3
        targets = torch.randint(0, vocab, (b, time), generator=generator)
        loss_mask = torch.rand(b, time, generator=generator) < 0.6
        loss_mask[0, -1] = True  # at least one position counts
        return logits, targets, loss_mask
