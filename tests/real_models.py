"""Real LLM code for tests/test_real_models.py: a hand-written minimal GPT in the style of nanoGPT/minGPT,
and realistic bugs planted one at a time in it and in Hugging Face models (harness.models.HFCausalLM).

Every planted bug is a subclass (or a small builder) that changes ONE thing; its docstring says what. The
correct variants (zero-initialized residual branches, LayerScale at 0, GPT-2 with zeroed c_proj) are NOT bugs:
a trustworthy preflight must let them through.

Axes: b batch, t time (positions), h heads, d per-head width, c channels (d_model = h * d)."""

from __future__ import annotations

import math
import types

import torch
from torch import nn
from torch.nn import functional as F

from harness.models import HFCausalLM

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
    vectorize: accepted and ignored, so that `model=transformer model._target_=tests.real_models.MiniGPT` works
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


# ---------------------------------------------------------------------------------------------------------
# correct variants a preflight must NOT flag
# ---------------------------------------------------------------------------------------------------------


def hf(vocab_size: int, arch: str, length: int, **kwargs) -> HFCausalLM:
    """A small HFCausalLM (d_model 32, 2 layers, 4 heads) for inputs of `length` tokens."""
    sizes = dict(d_model=32, layers=2, heads=4)
    return HFCausalLM(vocab_size, arch=arch, max_len=length, **{**sizes, **kwargs})


def gpt2_zeroed_c_proj(vocab_size: int, length: int, dropout: float = 0.0) -> HFCausalLM:
    """NOT a bug: GPT-2 whose every residual projection (attn.c_proj, mlp.c_proj), weight and bias, is zero,
    as zero-init / ReZero-style schemes start. Gradients reach the blocks' inner weights after one step."""
    model = hf(vocab_size, "gpt2", length, dropout=dropout)
    with torch.no_grad():
        for block in model.lm.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
    return model


# ---------------------------------------------------------------------------------------------------------
# planted bugs in Hugging Face models (before the embedding: what no hook inside the model can see)
# ---------------------------------------------------------------------------------------------------------


class RollInputs(HFCausalLM):
    """BUG: forward rolls input_ids by -1 along time before the model: position t reads token t+1, its own
    target. A leak before the embedding."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids.roll(-1, dims=1))


class SecondEmbedding(HFCausalLM):
    """BUG: a second embedding (`next_embedding`) of the NEXT token ids is added to the token embeddings and
    fed through inputs_embeds: a second path from the ids that leaks the future."""

    def __init__(self, vocab_size: int, **kwargs):
        super().__init__(vocab_size, **kwargs)
        self.next_embedding = nn.Embedding(vocab_size, self.lm.config.hidden_size)
        nn.init.normal_(self.next_embedding.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.token_embedding(input_ids) + self.next_embedding(input_ids.roll(-1, dims=1))
        return self.lm(inputs_embeds=embeds, use_cache=False).logits


class BatchRollInputs(HFCausalLM):
    """BUG: input_ids are mixed across the examples of the batch before the model (each example's ids are
    offset by the previous example's): a batch leak before the embedding."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mixed = (input_ids + input_ids.roll(1, dims=0)) % self.lm.config.vocab_size
        return super().forward(mixed)


class HFLogOfSoftmax(HFCausalLM):
    """BUG: a wrapper of a Hugging Face model that returns log(softmax(logits)) as its output: -inf once a
    probability underflows."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.softmax(super().forward(input_ids), dim=-1))


def attention_scaled_up(vocab_size: int, length: int, arch: str = "llama", d_model: int = 256) -> HFCausalLM:
    """BUG: a Hugging Face model (d_model 256, 4 heads of 64) whose attention modules scale their scores by
    sqrt(head_dim) instead of 1/sqrt(head_dim) (`self.scaling = self.head_dim ** 0.5`, as an edited copy of
    the attention class would)."""
    model = hf(vocab_size, arch, length, d_model=d_model)
    for module in model.modules():
        if hasattr(module, "scaling") and hasattr(module, "head_dim"):
            module.scaling = module.head_dim**0.5
    return model


def llama_layer_without_attention_residual(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
    """LlamaDecoderLayer.forward with `hidden_states = residual + hidden_states` after attention left out."""
    hidden_states, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
    residual = hidden_states
    return residual + self.mlp(self.post_attention_layernorm(hidden_states))


def llama_without_attention_residual(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama whose decoder layers drop the attention's residual connection (an edited copy of
    LlamaDecoderLayer.forward): each layer's output has lost its input."""
    model = hf(vocab_size, "llama", length)
    for layer in model.lm.model.layers:
        layer.forward = types.MethodType(llama_layer_without_attention_residual, layer)
    return model


def frozen(model: nn.Module, name: str) -> nn.Module:
    """`model` with parameter `name` frozen (requires_grad=False)."""
    model.get_parameter(name).requires_grad_(False)
    return model


def frozen_head(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama (untied) whose output head lm.lm_head.weight is frozen: the logits' own layer never learns."""
    return frozen(hf(vocab_size, "llama", length), "lm.lm_head.weight")


def frozen_tied_head(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: GPT-2 whose output head is frozen; tied to the token embedding, it freezes both."""
    return frozen(hf(vocab_size, "gpt2", length), "lm.lm_head.weight")


def frozen_embedding(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama whose token embedding lm.model.embed_tokens.weight is frozen: the tokens never learn."""
    return frozen(hf(vocab_size, "llama", length), "lm.model.embed_tokens.weight")


#: a non-essential tensor: one block's input RMSNorm gain
FROZEN_NORM = "lm.model.layers.0.input_layernorm.weight"


def frozen_norm(vocab_size: int, length: int) -> HFCausalLM:
    """SUSPICIOUS (a WARN, not a FAIL): Llama with one RMSNorm gain frozen; the model still learns, but a
    frozen tensor is usually an accident (a leftover of fine-tuning code)."""
    return frozen(hf(vocab_size, "llama", length), FROZEN_NORM)


# ---------------------------------------------------------------------------------------------------------
# planted bugs in MiniGPT
# ---------------------------------------------------------------------------------------------------------


class BlockedMLPBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention_branch(x)
        return x + 0.0 * self.mlp_branch(x)


class BlockedMLP(MiniGPT):
    """BUG: every MLP branch is multiplied by a constant 0 (`x + 0.0 * mlp(ln2(x))`): its parameters' gradients
    are exactly zero at init and stay zero after any number of steps."""

    block_class = BlockedMLPBlock


class SoftmaxOverQueries(CausalSelfAttention):
    def normalize(self, scores: torch.Tensor) -> torch.Tensor:
        return F.softmax(scores, dim=-2)


class SoftmaxWrongAxis(MiniGPT):
    """BUG: the attention softmax runs over the query axis (dim=-2) instead of the keys: the weight of key s
    at query t is normalized over all queries >= s, so every output depends on later positions' queries."""

    attention_class = SoftmaxOverQueries


class SplitWithoutTranspose(CausalSelfAttention):
    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        return x.reshape(b, self.heads, t, self.head_dim)  # should be view(b, t, h, d).transpose(1, 2)


class HeadsNoTranspose(MiniGPT):
    """BUG: the head split reshapes [b, t, h*d] straight to [b, h, t, d], without the transpose: each head's
    "position" axis holds pieces of other positions (later ones included), so the causal mask masks the
    wrong things."""

    attention_class = SplitWithoutTranspose


class MergeWithoutTranspose(CausalSelfAttention):
    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        b, h, t, d = y.shape
        return y.reshape(b, t, h * d)  # should be y.transpose(1, 2).contiguous().view(b, t, h * d)


class MergeHeadsNoTranspose(MiniGPT):
    """BUG: the heads are merged back by reshaping [b, h, t, d] straight to [b, t, h*d], without the
    transpose: position t's output is made of other positions' head outputs (later ones included)."""

    attention_class = MergeWithoutTranspose


class WeightChangedInForward(MiniGPT):
    """BUG: forward decays the output head's weight in place (`head.weight.mul_(0.999)` under no_grad), a
    misplaced weight-decay or EMA update: every call runs a different model."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.head.weight.mul_(0.999)
        return super().forward(input_ids)


class ConsumesRNG(MiniGPT):
    """BUG: forward adds tiny noise (`torch.randn_like`) to the embeddings even in eval mode: evaluation is
    random and every forward advances the global RNG."""

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = super().embed(input_ids)
        return x + 1e-6 * torch.randn_like(x)


class Reseeds(MiniGPT):
    """BUG: forward calls torch.manual_seed(0): every step draws the same dropout masks and resets the RNG of
    everything else in the process."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)
        return super().forward(input_ids)


class NoPositions1Layer(MiniGPT):
    """BUG: no position information in a 1-layer causal model: the attention average over keys 0..t is blind
    to their order, so swapping two earlier tokens cannot change the last output. (With more layers the causal
    mask itself leaks order into deeper layers: not this bug.)"""

    def __init__(self, vocab_size: int, **kwargs):
        super().__init__(vocab_size, **{**kwargs, "positions": "none", "layers": 1})


class TrainOnlyPositions(MiniGPT):
    """BUG: the position embedding is added only in training (`if self.training:`), a branch that runs only in
    training: in eval mode the model is blind to where each token is, though every train-mode check passes."""

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        if self.training:
            x = x + self.position_embedding(torch.arange(input_ids.shape[1], device=input_ids.device))
        return self.drop(x)


class ScoresTimesSqrtD(CausalSelfAttention):
    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-2, -1)) * math.sqrt(self.head_dim)  # should be / math.sqrt(self.head_dim)


class AttentionScaledUp(MiniGPT):
    """BUG: the attention scores are multiplied by sqrt(head_dim) instead of divided: head_dim times too large.
    At a usual head width (64) the softmax is saturated at init, nearly one-hot, and passes almost no gradient to
    the queries and keys; the small overfit still passes."""

    attention_class = ScoresTimesSqrtD


class ScoresUnscaled(CausalSelfAttention):
    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)  # should be divided by math.sqrt(self.head_dim)


class AttentionUnscaled(MiniGPT):
    """BUG: the attention scores are not scaled: sqrt(head_dim) times too large."""

    attention_class = ScoresUnscaled


class ScoresScaledTwice(CausalSelfAttention):
    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return super().scores(q, k) / math.sqrt(self.head_dim)  # the parent divides already


class AttentionScaledTwice(MiniGPT):
    """BUG (a WARN): the attention scores are divided by sqrt(head_dim) twice: sqrt(head_dim) times too small."""

    attention_class = ScoresScaledTwice


class QueryPrescaled(CausalSelfAttention):
    """Correct: the queries and the keys are each scaled by head_dim ** -0.25 before their product (the keys in
    place), which then scales q·kᵀ by 1/sqrt(head_dim)."""

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q, k = q * self.head_dim**-0.25, k.clone()
        k *= self.head_dim**-0.25
        return q @ k.transpose(-2, -1)


class AttentionQueryPrescaled(MiniGPT):
    attention_class = QueryPrescaled


class DeclaredTemperature(ScoresUnscaled):
    """Correct: unscaled scores, as the module says it means them."""

    attention_scale = 1.0


class AttentionDeclaredTemperature(MiniGPT):
    attention_class = DeclaredTemperature


class DocumentMaskedAttention(CausalSelfAttention):
    """Causal attention within each document only: `documents` ([b, t], set by the model before each forward)
    keeps a query from the keys of every other document."""

    documents: torch.Tensor | None = None

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = super().scores(q, k)
        if self.documents is None:
            return scores
        same = self.documents[:, None, :, None] == self.documents[:, None, None, :]
        return scores.masked_fill(~same, float("-inf"))


class DocumentMaskedMiniGPT(MiniGPT):
    """Correct for packed documents: a document's positions attend to its own earlier positions only, the
    documents found from the end-of-text id `eos_id` in the input (as packed pretraining masks them)."""

    attention_class = DocumentMaskedAttention

    def __init__(self, vocab_size: int, eos_id: int = 0, **kwargs):
        super().__init__(vocab_size, **kwargs)
        self.eos_id = eos_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        ends = (input_ids == self.eos_id).long()
        for block in self.blocks:
            block.attn.documents = ends.cumsum(dim=-1) - ends
        return super().forward(input_ids)


class QueryScaledBeforeRotary(ScoresUnscaled):
    """Correct: the queries scaled by 1/sqrt(head_dim) before the rotary embedding turns them (PaLM's order)."""

    def before_rope(self, q, k):
        return q * self.head_dim**-0.5, k


class QueryScaledInPlaceOnFusedView(ScoresUnscaled):
    """Correct: q and k views of one fused tensor, q scaled in place (k, beside it in the same storage, is not)."""

    def before_rope(self, q, k):
        fused = torch.stack((q, k))
        q, k = fused[0], fused[1]
        q.mul_(self.head_dim**-0.5)
        return q, k


class ScoresScaledInPlace(CausalSelfAttention):
    """Correct: the product divided in place after it is made."""

    def scores(self, q, k):
        scores = q @ k.transpose(-2, -1)
        scores /= math.sqrt(self.head_dim)
        return scores


class ScoresBySum(CausalSelfAttention):
    """Correct: q·kᵀ as a broadcast product summed over the width, no torch product to read its factor from."""

    def scores(self, q, k):
        return (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / math.sqrt(self.head_dim)


class FiniteMaskFill(CausalSelfAttention):
    """Correct: the causal mask fills -1e9, as older code does, not -inf."""

    fill = -1e9


class UnscaledFiniteMaskFill(ScoresUnscaled):
    fill = -1e9


class AttentionUnscaledFiniteMask(MiniGPT):
    """BUG: unscaled scores behind a mask filled with -1e9."""

    attention_class = UnscaledFiniteMaskFill


def with_attention(cls: type[CausalSelfAttention]) -> type[MiniGPT]:
    """A MiniGPT whose attention is `cls`."""
    return type(f"MiniGPT{cls.__name__}", (MiniGPT,), {"attention_class": cls})


class NoAttentionResidualBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_branch(x)  # should be x = x + self.attention_branch(x)
        return x + self.mlp_branch(x)


class NoAttentionResidual(MiniGPT):
    """BUG: the attention branch's residual connection is dropped (`x = attn(ln1(x))`): each block's output has
    lost its input, and the stream restarts from attention's output at every layer."""

    block_class = NoAttentionResidualBlock


class LogOfSoftmax(MiniGPT):
    """BUG: forward returns log-probabilities computed as log(softmax(logits)): the same as the logits under
    cross entropy while every probability is representable, -inf (and NaN gradients) once one underflows."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.softmax(super().forward(input_ids), dim=-1).log()


class HandMadeLogSoftmax(MiniGPT):
    """BUG: forward returns logits - log(sum(exp(logits))), a log-sum-exp without its max subtracted: exp
    overflows to inf once a logit passes ~88 (float32)."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = super().forward(input_ids)
        return logits - torch.log(torch.exp(logits).sum(dim=-1, keepdim=True))


# ---------------------------------------------------------------------------------------------------------
# x-transformers: a third-party decoder behind the Model contract
# ---------------------------------------------------------------------------------------------------------


class XDecoder(nn.Module):
    """x-transformers' TransformerWrapper(Decoder) as a fork would wrap it: its own init (not GPT-2's),
    positions by option (`rotary`, `alibi` or `absolute`), `token_embedding` its token embedding. `dropout` sets
    its embedding, attention and feed-forward dropout; `layers`, `heads` and `vectorize` take the built-in
    transformer's keys, so `model=transformer model._target_=tests.real_models.XDecoder` works."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 64,
        positions: str = "rotary",
        d_model: int = 32,
        layers: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        vectorize: bool = True,
        **kwargs,
    ):
        super().__init__()
        from x_transformers import Decoder, TransformerWrapper

        rates = {"attn_dropout": dropout, "ff_dropout": dropout} if dropout else {}
        self.net = TransformerWrapper(
            num_tokens=vocab_size,
            max_seq_len=max_len,
            use_abs_pos_emb=positions == "absolute",
            emb_dropout=dropout,
            attn_layers=Decoder(
                dim=d_model,
                depth=layers,
                heads=heads,
                rotary_pos_emb=positions == "rotary",
                alibi_pos_bias=positions == "alibi",
                **{**rates, **kwargs},
            ),
        )

    @property
    def token_embedding(self) -> nn.Module:
        return self.net.token_emb.emb

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.net(input_ids)


def branch_only(self, x: torch.Tensor, residual: torch.Tensor, **kwargs) -> torch.Tensor:
    """x-transformers' Residual.forward with the residual left out: the branch's output alone."""
    return x


def x_decoder_without_residual(vocab_size: int, length: int) -> XDecoder:
    """BUG: x-transformers' decoder whose Residual modules return the branch alone (an edited Residual.forward):
    every sublayer's output has lost its input."""
    from x_transformers.x_transformers import Residual

    model = XDecoder(vocab_size, max_len=length)
    for module in model.modules():
        if isinstance(module, Residual):
            module.forward = types.MethodType(branch_only, module)
    return model
