"""TinyLM, a minimal bug-free model meeting the Model contract (docs/contracts.md): token embedding -> one causal
self-attention layer (residual) -> linear head; and its subclasses, each planting exactly ONE bug by overriding
one step of it. MODEL_BUGS pairs each with the check that must FAIL and what its detail must (not) name."""

from __future__ import annotations

import math

import pytest
import torch
from einops import rearrange
from torch import nn

from harness import checks

VOCAB, BATCH, TIME, WIDTH = 11, 4, 8, 16
CFG = {"seed": 0}


# ---------------------------------------------------------------------------------------------------------
# 1a. model bugs
# ---------------------------------------------------------------------------------------------------------


class TinyLM(nn.Module):
    """The bug-free baseline: token + position embedding -> x + causal attention(x) -> head.
    [b, time] -> [b, time, vocab]."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__()
        self.d_model = d_model
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(TIME, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.head = nn.Linear(d_model, vocab_size)
        nn.init.normal_(self.head.weight, std=0.02)  # small logits at init: the loss starts near ln(vocab)
        nn.init.zeros_(self.head.bias)

    def allowed(self, time: int) -> torch.Tensor:
        """[query time, key time], True where the query may attend to the key: keys 0..t for query t."""
        return torch.ones(time, time, dtype=torch.bool).tril()

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(self.qkv(x), "b time (three d) -> three b time d", three=3)
        scores = self.scaled(torch.einsum("btd,bsd->bts", q, k))
        scores = scores.masked_fill(~self.allowed(x.shape[1]).to(x.device), float("-inf"))
        return torch.einsum("bts,bsd->btd", scores.softmax(dim=-1), v)

    def scaled(self, scores: torch.Tensor) -> torch.Tensor:
        return scores / math.sqrt(self.d_model)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.token_embedding(input_ids) + self.position_embedding(positions)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attend(x)

    def readout(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.readout(self.mix(self.embed(input_ids)))


class ScoresScaledUp(TinyLM):
    """BUG: the attention scores are multiplied by sqrt(d) instead of divided: the softmax starts saturated."""

    def scaled(self, scores):
        return scores * math.sqrt(self.d_model)


class LogOfSoftmax(TinyLM):
    """BUG: forward returns log(softmax(logits)), which is -inf wherever a probability underflows."""

    def readout(self, x):
        return super().readout(x).softmax(dim=-1).log()


class DetachedLayer(TinyLM):
    """BUG: the mixing layer's output is detached: nothing before it (embedding, qkv) ever learns."""

    def mix(self, x):
        return super().mix(x).detach()


class UnusedParameter(TinyLM):
    """BUG: a parameter is registered but never used in forward."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.unused_gate = nn.Parameter(torch.ones(d_model))


class ZeroedParameter(TinyLM):
    """BUG: a parameter enters the output only multiplied by 0: its gradient is exactly zero."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.gate = nn.Parameter(torch.ones(d_model))

    def mix(self, x):
        return super().mix(x) + 0.0 * self.gate


class SwappedReshape(TinyLM):
    """BUG: flattens (b time), then unflattens as (time b): rows of different examples get swapped in."""

    def mix(self, x):
        flat = rearrange(super().mix(x), "b time d -> (b time) d")
        return rearrange(flat, "(time b) d -> b time d", b=x.shape[0])


class BatchMeanAdded(TinyLM):
    """BUG: the mean over the batch axis is added to every position of every example."""

    def mix(self, x):
        mixed = super().mix(x)
        return mixed + mixed.mean(dim=0, keepdim=True)


class NoCausalMask(TinyLM):
    """BUG: attention sees every key, including the future."""

    def allowed(self, time):
        return torch.ones(time, time, dtype=torch.bool)


class OffByOneMask(TinyLM):
    """BUG: the causal mask is off by one: query t sees keys 0..t+1."""

    def allowed(self, time):
        return torch.ones(time, time, dtype=torch.bool).tril(diagonal=1)


class HugeOutputScale(TinyLM):
    """BUG: the logits are scaled by 100: the loss at init is far above ln(vocab)."""

    def readout(self, x):
        return super().readout(x) * 100.0


class PrivateGenerator(TinyLM):
    """BUG: noise drawn from a generator created in __init__: re-seeding the global RNGs cannot reach it."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.noise = torch.Generator().manual_seed(0)

    def mix(self, x):
        mixed = super().mix(x)
        return mixed + 0.1 * torch.randn(mixed.shape, generator=self.noise).to(mixed)


class SeededDropout(TinyLM):
    """NOT a bug: dropout draws from the global generator, which seeding resets."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.dropout = nn.Dropout(0.2)

    def mix(self, x):
        return self.dropout(super().mix(x))


class Exp1000(nn.Module):
    def forward(self, x):
        return torch.exp(1000.0 * x)  # overflows to inf wherever x > ~0.09


class EmitsInf(TinyLM):
    """BUG: a layer (attribute `blowup`) overflows to inf at init."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.blowup = Exp1000()

    def mix(self, x):
        return self.blowup(super().mix(x))


class IgnoresInput(TinyLM):
    """BUG: forward starts from a learned constant instead of the embedded tokens."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.start = nn.Parameter(torch.randn(d_model))

    def embed(self, input_ids):
        return self.start.expand(*input_ids.shape, self.d_model)


class RollsInputIds(TinyLM):
    """BUG: forward rolls the ids one step left before embedding them: each position reads its own target."""

    def forward(self, input_ids):
        return super().forward(input_ids.roll(-1, dims=1))


class NoPositions(TinyLM):
    """BUG: the position embedding is never added: one layer of attention is then blind to word order."""

    def embed(self, input_ids):
        return self.token_embedding(input_ids) + 0.0 * self.position_embedding.weight.sum()


class FrozenHead(TinyLM):
    """BUG: the output head is frozen: a random projection that never learns."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.head.weight.requires_grad_(False)


class ZeroInitHead(TinyLM):
    """NOT a bug: a zero-initialized output layer gives every parameter behind it a zero gradient at step 0,
    by design; one optimizer step later they all learn (as zero-init residual branches, LayerScale at 0)."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        nn.init.zeros_(self.head.weight)


class ScalesItsHead(TinyLM):
    """BUG: forward decays a weight in place, under no_grad: every call runs a different model."""

    def readout(self, x):
        with torch.no_grad():
            self.head.weight.mul_(0.999)
        return super().readout(x)


class NoisyInEval(TinyLM):
    """BUG: noise from the global generator, in eval mode too: evaluation is random."""

    def readout(self, x):
        return super().readout(x + 1e-3 * torch.randn_like(x))


class Jitter(nn.Module):
    def forward(self, x):
        return x + 1e-3 * torch.randn_like(x)  # in eval mode too


class JitterLayer(TinyLM):
    """BUG: a layer (attribute `jitter`) adds noise from the global generator in eval mode too."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.jitter = Jitter()

    def mix(self, x):
        return self.jitter(super().mix(x))


class ReseedsInForward(TinyLM):
    """BUG: forward calls torch.manual_seed: every call draws the same 'random' numbers."""

    def forward(self, input_ids):
        torch.manual_seed(1234)
        return super().forward(input_ids)


#: (model, check that must FAIL, strings its detail must contain, strings it must not contain)
MODEL_BUGS = [
    pytest.param(
        DetachedLayer,
        checks.gradient_flow,
        ["not connected", "token_embedding.weight", "qkv.weight", "qkv.bias"],
        ["head.", "blocked"],
        id="detached-layer",
    ),
    pytest.param(
        UnusedParameter,
        checks.gradient_flow,
        ["not connected", "unused_gate"],
        ["token_embedding", "qkv", "head.", "blocked"],
        id="unused-parameter",
    ),
    pytest.param(
        ZeroedParameter,
        checks.gradient_flow,
        ["blocked", "gate"],
        ["not connected", "token_embedding", "qkv", "head."],
        id="zero-gradient",
    ),
    pytest.param(
        SwappedReshape,
        checks.batch_independence,
        ["moves the logits of examples 0, 2", "mixes the batch axis", "between modules", "'head'"],
        [],
        id="reshape-mixes-batch-and-time",
    ),
    pytest.param(
        BatchMeanAdded,
        checks.batch_independence,
        ["changing the tokens of examples 1, 3 moves the logits of examples 0, 2"],
        [],
        id="mean-over-batch",
    ),
    pytest.param(
        NoCausalMask,
        checks.causality,
        [
            "after position 0",
            f"input {TIME - 1} moves outputs 0, 1, 2, 3, ... ({TIME - 1} in all)",
            "no causal mask",
        ],
        [],
        id="no-causal-mask",
    ),
    # query t sees key t + 1 and nothing later: the detail names exactly the one leaked position
    pytest.param(
        OffByOneMask,
        checks.causality,
        ["input 1 moves outputs 0;", f"input {TIME - 1} moves outputs {TIME - 2} (", "off by one"],
        [],
        id="mask-off-by-one",
    ),
    pytest.param(
        HugeOutputScale,
        checks.init_loss,
        [f"ln({VOCAB}) = {math.log(VOCAB):.3f}", "measured"],
        [],
        id="output-scale-100x",
    ),
    pytest.param(
        PrivateGenerator, checks.determinism, ["loss", "under the same seed"], [], id="private-generator"
    ),
    pytest.param(EmitsInf, checks.finite, ["module 'blowup'"], [], id="layer-emits-inf"),
    pytest.param(IgnoresInput, checks.input_dependence, ["ignores its input"], [], id="ignores-input"),
    pytest.param(
        RollsInputIds,
        checks.causality,
        ["each position sees the next input", "token ids 'token_embedding' receives", "before any module"],
        [],
        id="ids-rolled-before-the-embedding",
    ),
    pytest.param(NoPositions, checks.word_order, ["ignores word order"], [], id="no-position-information"),
    pytest.param(
        FrozenHead,
        checks.gradient_flow,
        ["frozen", "head.weight (the output head)"],
        ["qkv"],
        id="frozen-head",
    ),
    pytest.param(
        ScalesItsHead,
        checks.determinism,
        ["forward changes head.weight in place"],
        ["private"],
        id="weight-changed-in-forward",
    ),
    pytest.param(
        ScoresScaledUp,
        checks.attention_scale,
        ["nearly one-hot at initialization in forward", "sqrt(head_dim)"],
        [],
        id="attention-scores-times-sqrt-d",
    ),
    pytest.param(
        LogOfSoftmax,
        checks.stable_log_probs,
        ["output of 'head'", "log(softmax(x))"],
        [],
        id="log-of-softmax",
    ),
    pytest.param(
        NoisyInEval, checks.global_rng, ["eval-mode forward draws from the global RNG"], [], id="rng-in-eval"
    ),
    pytest.param(
        ReseedsInForward, checks.global_rng, ["re-seeds the global RNG"], [], id="reseeds-in-forward"
    ),
]
