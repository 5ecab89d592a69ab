"""GPT, as nanoGPT and nanochat write it, sized by preset (tiny, small, gpt2): pre-norm blocks, fused causal
attention, a tied head, learned or rotary positions, GPT-2's init. Axes: b batch, time, heads, dim per-head
width, half the rotary pairs (dim = 2 * half)."""

from __future__ import annotations

import math

import torch
from einops import einsum, rearrange
from torch import nn
from torch.nn import functional as F

from harness.config.groups.model import POSITIONS, SIZES
from harness.errors import ConfigError


def rotary_angles(time: int, dim: int, device: torch.device, base: float = 10000.0) -> tuple:
    """cos and sin [time, half] of rotary embeddings (position t turns pair i by t * base^(-2i/dim)), in
    float32 on each call: no buffer loses precision when the model is cast."""
    frequencies = base ** -(torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    positions = torch.arange(time, device=device, dtype=torch.float32)
    angles = einsum(positions, frequencies, "time, half -> time half")
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """q or k [b, heads, time, dim], each pair of channels (2i, 2i+1) rotated by its position's angle i."""
    even, odd = rearrange(x.float(), "b heads time (half pair) -> pair b heads time half", pair=2)
    turned = [even * cos - odd * sin, even * sin + odd * cos]
    return rearrange(turned, "pair b heads time half -> b heads time (half pair)").type_as(x)


def gpt2_init(module: nn.Module) -> None:
    """GPT-2's init of one module (model.apply(gpt2_init)): N(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, bias: bool):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)  # the residual projection: scaled at init
        self.out_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, rotary: tuple | None) -> torch.Tensor:
        q, k, v = rearrange(
            self.qkv(x), "b time (qkv heads dim) -> qkv b heads time dim", qkv=3, heads=self.heads
        )
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        dropout = self.dropout if self.training else 0.0
        # fused and causal: no mask buffer to keep in sync
        mixed = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.out_dropout(self.out(rearrange(mixed, "b heads time dim -> b time (heads dim)")))


class MLP(nn.Module):
    def __init__(self, d_model: int, dropout: float, bias: bool):
        super().__init__()
        self.up = nn.Linear(d_model, 4 * d_model, bias=bias)
        self.out = nn.Linear(4 * d_model, d_model, bias=bias)  # the residual projection: scaled at init
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.out(F.gelu(self.up(x))))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, bias: bool):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, bias=bias)
        self.attention = CausalSelfAttention(d_model, heads, dropout, bias)
        self.norm2 = nn.LayerNorm(d_model, bias=bias)
        self.mlp = MLP(d_model, dropout, bias)

    def forward(self, x: torch.Tensor, rotary: tuple | None) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), rotary)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """input_ids Long[b, time] -> logits [b, time, vocab_size], causal. `size` picks d_model, layers and heads
    from SIZES (each given overrides it); `max_len` bounds learned positions; `bias=False` drops every bias.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 1024,
        size: str = "tiny",
        d_model: int | None = None,
        layers: int | None = None,
        heads: int | None = None,
        positions: str = "learned",
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if size not in SIZES:
            raise ConfigError("model.size", size, f"choose one of {', '.join(SIZES)}")
        d_model, layers, heads = (
            preset if given is None else given
            for given, preset in zip((d_model, layers, heads), SIZES[size], strict=True)
        )
        for key, value in (("d_model", d_model), ("layers", layers), ("heads", heads), ("max_len", max_len)):
            if value < 1:
                raise ConfigError(f"model.{key}", value, "must be >= 1")
        if d_model % heads:
            raise ConfigError(
                "model.heads",
                heads,
                f"must divide model.d_model={d_model} (each head is d_model / heads wide)",
            )
        if positions not in POSITIONS:
            raise ConfigError("model.positions", positions, f"choose one of {', '.join(POSITIONS)}")
        if positions == "rope" and (d_model // heads) % 2:
            raise ConfigError(
                "model.heads",
                heads,
                f"rope turns channel pairs: d_model / heads = {d_model // heads} must be even",
            )
        self.max_len, self.positions, self.head_dim = max_len, positions, d_model // heads
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model) if positions == "learned" else None
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, heads, dropout, bias) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        # tied, as GPT-2: one tensor, two uses; a token's input and output vectors learn together
        self.head.weight = self.token_embedding.weight
        self.init_weights()

    def init_weights(self) -> None:
        """GPT-2's init of every parameter: what the constructor does, and what a model built on the meta
        device gets once sharded (trainer.strategy.meta_init)."""
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.reset_parameters()
        self.apply(gpt2_init)
        # each residual branch's output projection smaller: the residual stream's variance stays flat in depth
        for block in self.blocks:
            for projection in (block.attention.out, block.mlp.out):
                nn.init.normal_(projection.weight, std=0.02 / math.sqrt(2 * len(self.blocks)))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        time = input_ids.shape[1]
        x = self.token_embedding(input_ids)
        rotary = None
        if self.position_embedding is not None:
            if time > self.max_len:
                raise ValueError(f"input of {time} positions is longer than model.max_len={self.max_len}")
            x = x + self.position_embedding(torch.arange(time, device=input_ids.device))
        else:
            rotary = rotary_angles(time, self.head_dim, input_ids.device)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, rotary)
        return self.head(self.norm(x))
