"""A small decoder-only transformer (pre-norm, learned positions), in the spirit of nanoGPT.

Axes: b batch, time positions, heads attention heads, dim per-head width."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from harness.models.gpt import gpt2_init
from harness.ops import CausalAttention


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, vectorize: bool):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"model.d_model={d_model} must be divisible by model.heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attend = CausalAttention(vectorize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(
            self.qkv(x), "b time (qkv heads dim) -> qkv b heads time dim", qkv=3, heads=self.heads
        )
        mixed = rearrange(self.attend(q, k, v), "b heads time dim -> b time (heads dim)")
        return self.dropout(self.out(mixed))


class MLP(nn.Module):
    def __init__(self, d_model: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, vectorize: bool):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads, dropout, vectorize)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """input_ids Long[b, time] -> logits [b, time, vocab_size]; position t sees inputs 0..t only."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 64,
        layers: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        vectorize: bool = True,
    ):
        super().__init__()
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, heads, dropout, vectorize) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.apply(gpt2_init)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        time = input_ids.shape[1]
        if time > self.max_len:
            raise ValueError(f"input of {time} positions is longer than model.max_len={self.max_len}")
        positions = torch.arange(time, device=input_ids.device)
        x = self.dropout(self.token_embedding(input_ids) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
