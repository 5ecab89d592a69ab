"""Realistic bugs planted one at a time in MiniGPT, each a subclass that changes ONE thing (its docstring says
what), beside the correct variants a preflight must let through (an attention temperature the module declares,
queries scaled before the rotary turn, attention masked by document).

Axes: b batch, t time (positions), h heads, d per-head width, c channels (d_model = h * d)."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from tests.forks.real_models.minigpt import Block, CausalSelfAttention, MiniGPT

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
