"""MiniGPT: a hand-written minimal GPT in the style of nanoGPT/minGPT, bug-free, with learned, rotary or no
positions; the baseline the bugs of minigpt_bugs.py are planted in.

Axes: b batch, t time (positions), h heads, d per-head width, c channels (d_model = h * d)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

POSITIONS = ("learned", "rope", "none")

# ---------------------------------------------------------------------------------------------------------
# MiniGPT: the bug-free baseline
# ---------------------------------------------------------------------------------------------------------


def rope_tables(max_len: int, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_len, dim] of rotary position embeddings (the rotate-half layout of GPT-NeoX/Llama)."""
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate q or k [b, h, t, d] by each position's angles."""
    t = x.shape[-2]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:t] + torch.cat([-x2, x1], dim=-1) * sin[:t]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, written out as nanoGPT's slow path does: an explicit tril mask."""

    def __init__(self, d_model: int, heads: int, max_len: int, dropout: float, rope: bool):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be divisible by heads={heads}")
        self.heads, self.head_dim, self.rope = heads, d_model // heads, rope
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)).view(1, 1, max_len, max_len)
        self.register_buffer("mask", mask, persistent=False)
        if rope:
            cos, sin = rope_tables(max_len, self.head_dim)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[b, t, c] -> [b, h, t, d]"""
        b, t, c = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """[b, h, t, d] -> [b, t, c]"""
        b, h, t, d = y.shape
        return y.transpose(1, 2).contiguous().view(b, t, h * d)

    def normalize(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention weights [b, h, query, key]: a softmax over the keys."""
        return F.softmax(scores, dim=-1)

    #: what the causal mask fills the scores with (-inf; older code fills -1e9 or -1e4)
    fill = float("-inf")

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """[b, h, query, key]: q . k / sqrt(d)"""
        return (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)

    def before_rope(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k as the heads split them, before the rotary embedding: as they are."""
        return q, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q, k, v = self.qkv(x).split(x.shape[-1], dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        q, k = self.before_rope(q, k)
        if self.rope:
            q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
        scores = self.scores(q, k).masked_fill(~self.mask[:, :, :t, :t], self.fill)
        weights = self.attn_dropout(self.normalize(scores))
        return self.resid_dropout(self.proj(self.merge_heads(weights @ v)))


class MLP(nn.Module):
    def __init__(self, d_model: int, dropout: float):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d_model, d_model)  # the output Linear: zero_init_residual zeroes it
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class LayerScale(nn.Module):
    """A learnable per-channel gain on a residual branch (CaiT), initialized to 0: the branch starts closed."""

    def __init__(self, d_model: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gamma * x


class Block(nn.Module):
    """Pre-norm: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        max_len: int,
        dropout: float,
        rope: bool,
        layerscale: bool,
        attention: type[CausalSelfAttention] = CausalSelfAttention,
    ):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attention(d_model, heads, max_len, dropout, rope)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)
        self.scale1 = LayerScale(d_model) if layerscale else nn.Identity()
        self.scale2 = LayerScale(d_model) if layerscale else nn.Identity()

    def attention_branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale1(self.attn(self.ln1(x)))

    def mlp_branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale2(self.mlp(self.ln2(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention_branch(x)
        return x + self.mlp_branch(x)


class MiniGPT(nn.Module):
    """A minimal GPT, nanoGPT/minGPT style. input_ids Long[b, t] -> logits [b, t, vocab_size].

    positions: learned (an nn.Embedding of positions, GPT-2), rope (rotary, on q and k) or none.
    zero_init_residual: each branch's output Linear (attn.proj, mlp.proj) starts at zero.
    layerscale: a learnable per-channel gain on each branch, starting at zero.
    vectorize: accepted and ignored, so that `model=transformer model._target_=tests.forks.real_models.minigpt.MiniGPT` works
    with the built-in transformer's keys.

    `block_class` and `attention_class` are the classes the blocks are built of: a planted bug subclasses MiniGPT and
    swaps one of them for a subclass that changes one method."""

    block_class: type[Block] = Block
    attention_class: type[CausalSelfAttention] = CausalSelfAttention

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 64,
        d_model: int = 32,
        layers: int = 2,
        heads: int = 4,
        positions: str = "learned",
        dropout: float = 0.0,
        zero_init_residual: bool = False,
        layerscale: bool = False,
        vectorize: bool = True,
    ):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions={positions!r}: choose one of {', '.join(POSITIONS)}")
        self.max_len, self.positions = max_len, positions
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model) if positions == "learned" else None
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            self.block_class(
                d_model, heads, max_len, dropout, positions == "rope", layerscale, self.attention_class
            )
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)  # untied from token_embedding
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2 * layers)
            for proj in (block.attn.proj, block.mlp.proj):
                if zero_init_residual:
                    nn.init.zeros_(proj.weight)
                else:
                    nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(input_ids.shape[1], device=input_ids.device))
        return self.drop(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
