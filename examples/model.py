"""A model a fork might write: a causal convolutional language model meeting the Model contract.

    python train.py model=rnn model._target_=examples.model.ConvLM     # rnn's keys are ConvLM's keys
    cp examples/conf/model/conv.yaml conf/model/ && python train.py model=conv

Axes: b batch, time positions, d features."""

from __future__ import annotations

import torch
from torch import nn

from examples.twin import CausalConv


class ConvBlock(nn.Module):
    """x + mix(gelu(causal depthwise conv(x))): each position sees itself and the `kernel - 1` before it."""

    def __init__(self, d_model: int, kernel: int, vectorize: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_model, kernel) / kernel**0.5)
        self.conv = CausalConv(vectorize)
        self.mix = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(torch.nn.functional.gelu(self.conv(x, self.weight)))


class ConvLM(nn.Module):
    """token_embedding -> `layers` ConvBlocks -> linear head. input_ids Long[b, time] -> logits [b, time, vocab].

    vocab_size is passed in by the harness; every other argument comes from the model config, and an
    unknown one fails (Python's own TypeError, turned into a one-line config error by the harness)."""

    def __init__(
        self, vocab_size: int, d_model: int = 64, layers: int = 2, kernel: int = 4, vectorize: bool = True
    ):
        super().__init__()
        if kernel < 1:
            raise ValueError(f"kernel={kernel}: the convolution needs at least 1 tap (try model.kernel=4)")
        self.token_embedding = nn.Embedding(vocab_size, d_model)  # the name probes and checks hook
        self.blocks = nn.ModuleList(ConvBlock(d_model, kernel, vectorize) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab_size)
        nn.init.normal_(self.head.weight, std=0.02)  # small logits at init: the loss starts near ln(vocab)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)
