"""Every preflight check catches the bug it claims to catch, and raises no false alarm on the built-ins.

Three parts:

1. Planted bugs. `TinyLM` is a minimal, bug-free model meeting the Model contract (docs/contracts.md): token
   embedding -> one causal self-attention layer (residual) -> linear head. Each subclass below plants
   exactly ONE bug by overriding one step of it, and the test asserts that the check named for that bug
   returns FAIL with a detail that names the fault (parameter, position, module or key). `TinyLM` itself
   passes every check, so each FAIL comes from the planted bug and nothing else. The data checks get the
   same treatment with minimal datamodule-like objects (real DataLoaders, a real CharTokenizer), and the
   `twins` check with a disagreeing Twin defined inside its test (and removed again afterwards).
2. No false alarm: every check passes on every built-in model, on synthetic and on text data, with the
   twins vectorized and (for the model checks) with their loop versions.
3. The twins themselves: loop and vectorized agree, in value and in gradient, on every registered twin
   and every one of its test shapes; the loop version warns once, the vectorized one never.
"""

from __future__ import annotations

import copy
import gc
import logging
import math

import pytest
import torch
from einops import rearrange
from torch import nn
from torch.utils.data import DataLoader, Dataset

import harness.ops
from harness import checks
from harness.checks import FAIL, PASS, WARN
from harness.checks.model.passes import train_pass
from harness.data import CharTokenizer, SyntheticDataModule, TextDataModule
from harness.models import LSTM, RNN, Transformer
from harness.ops import CausalAttention, Twin, max_difference, registered

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


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


@pytest.fixture
def lm_batch() -> dict:
    """A language-modelling Batch (every position in the loss) of random tokens."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, TIME + 1), generator=generator)
    return {
        "input_ids": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "loss_mask": torch.ones(BATCH, TIME, dtype=torch.bool),
    }


def build(model_cls, *args, **kwargs) -> nn.Module:
    torch.manual_seed(0)
    return model_cls(*args, **kwargs)


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
def test_bug_free_baseline_passes(check, lm_batch):
    """The control: without a planted bug, every model check passes on TinyLM."""
    result = check(build(TinyLM, VOCAB), lm_batch, CFG)
    assert result.status == PASS, result


@pytest.mark.parametrize(("model_cls", "check", "named", "not_named"), MODEL_BUGS)
def test_check_catches_planted_model_bug(model_cls, check, named, not_named, lm_batch):
    result = check(build(model_cls, VOCAB), lm_batch, CFG)
    assert result.name == check.__name__
    assert result.status == FAIL, f"{check.__name__} missed the bug of {model_cls.__name__}: {result}"
    for piece in named:
        assert piece in result.detail, f"{piece!r} not named in: {result.detail}"
    for piece in not_named:
        assert piece not in result.detail, f"{piece!r} wrongly named in: {result.detail}"


def test_zero_initialized_output_is_no_blocked_path(lm_batch):
    """The control of zero-gradient: an exactly zero gradient that one optimizer step wakes is by design."""
    model = build(ZeroInitHead, VOCAB)
    grads = train_pass(model, lm_batch, seed=0).grads
    assert not grads["qkv.weight"].any() and not grads["token_embedding.weight"].any(), "no zero gradient"
    result = checks.gradient_flow(model, lm_batch, CFG)
    assert result.status == PASS and "only after one step" in result.detail, result
    assert not model.head.weight.any(), "the step was taken on the model itself, not on a copy"


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
def test_zero_initialized_output_passes_every_check(check, lm_batch):
    """A zero-initialized output head (as some GPT recipes do) makes the logits ignore the input at step 0:
    the checks that compare logits judge the model after one optimizer step instead."""
    result = check(build(ZeroInitHead, VOCAB), lm_batch, CFG)
    assert result.status == PASS, result


def test_frozen_tensor_the_loss_does_not_need_is_a_warning(lm_batch):
    model = build(TinyLM, VOCAB)
    model.qkv.bias.requires_grad_(False)
    result = checks.gradient_flow(model, lm_batch, CFG)
    assert result.status == WARN and "1 frozen" in result.detail and "qkv.bias" in result.detail, result


def test_checks_comparing_two_passes_do_not_blame_a_weight_changed_in_forward(lm_batch):
    """A model that changes its weights in forward is determinism's finding; the leak checks say they
    could not judge instead of reporting a leak."""
    for check in (checks.causality, checks.batch_independence, checks.word_order, checks.input_dependence):
        result = check(build(ScalesItsHead, VOCAB), lm_batch, CFG)
        assert result.status == WARN and "head.weight in place" in result.detail, result


def test_determinism_accepts_randomness_that_seeding_reaches(lm_batch):
    """The control of private-generator: training-mode dropout is random, yet repeatable under a seed."""
    model = build(SeededDropout, VOCAB)
    with torch.no_grad():
        assert not torch.equal(model.train()(lm_batch["input_ids"]), model(lm_batch["input_ids"])), (
            "dropout is off"
        )
    result = checks.determinism(model, lm_batch, CFG)
    assert result.status == PASS, result


def test_measured_init_loss_is_the_real_loss(lm_batch):
    """init_loss reports the losses it measured, not some other numbers: the mean over every class as the
    target (what it judges) and the loss on the batch's own targets."""
    model = build(HugeOutputScale, VOCAB)
    result = checks.init_loss(model, lm_batch, CFG)
    with torch.no_grad():
        logits = model(lm_batch["input_ids"]).flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(logits, lm_batch["targets"].flatten()).item()
        every = (
            torch.stack(
                [
                    torch.nn.functional.cross_entropy(
                        logits, torch.full_like(lm_batch["targets"].flatten(), c)
                    )
                    for c in range(VOCAB)
                ]
            )
            .mean()
            .item()
        )
    assert loss > 3 * math.log(VOCAB)
    assert f"measured {every:.3f} over every target" in result.detail, (every, result.detail)
    assert f"{loss:.3f} on this batch's targets" in result.detail, (loss, result.detail)


def test_init_loss_is_not_fooled_by_which_targets_a_few_positions_hold():
    """Logits of std 0.6 (a common default init) on 4 labelled positions: the loss on those targets
    scatters by ~10% around ln(vocab) + 0.18; the mean over every target stays within 10% of ln(vocab)."""
    generator = torch.Generator().manual_seed(0)
    logits = 0.6 * torch.randn(4, 8, 20, generator=generator)
    mask = torch.zeros(4, 8, dtype=torch.bool)
    mask[:, -1] = True
    targets = logits.argmin(dim=-1)  # the least likely class: the worst case for the batch's own loss

    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embedding = nn.Embedding(20, 1)

        def forward(self, input_ids):
            return logits + 0 * self.token_embedding(input_ids)

    batch = {"input_ids": torch.zeros(4, 8, dtype=torch.long), "targets": targets, "loss_mask": mask}
    result = checks.init_loss(Fixed(), batch, CFG)
    on_targets = torch.nn.functional.cross_entropy(logits[:, -1], targets[:, -1]).item()
    assert on_targets > 1.1 * math.log(20), on_targets  # the old judgement would have warned
    assert result.status == PASS, result


def test_checks_leave_the_model_as_they_found_it(lm_batch):
    """A check restores train/eval mode and leaves no gradients behind (the preflight runs before training)."""
    model = build(TinyLM, VOCAB).eval()
    for check in checks.MODEL_CHECKS:
        check(model, lm_batch, CFG)
        assert not model.training, check.__name__
        assert all(p.grad is None for p in model.parameters()), check.__name__


# ---------------------------------------------------------------------------------------------------------
# 1b. data bugs: minimal datamodule-like objects with real DataLoaders and a real CharTokenizer
# ---------------------------------------------------------------------------------------------------------

LENGTH = 8
TEXTS = ["the cat!", "a dog r.", "big hats", "red fox?", "wet sand", "old mill", "hot tea.", "sun set!"]
TEXTS = [text + "@" for text in TEXTS]  # length + 1 characters; the last two always differ
TOKENIZER = CharTokenizer("".join(sorted(set("".join(TEXTS)))))


class LMDataset(Dataset):
    """Language-modelling records {"text": length + 1 chars} -> Batch rows; record(i) is the source of row i."""

    def __init__(self, texts: list[str], shift: bool = True):
        self.records = [{"text": text} for text in texts]
        ids = torch.tensor([TOKENIZER.encode(text) for text in texts], dtype=torch.long)
        self.input_ids = ids[:, :-1].clone()
        self.targets = (ids[:, 1:] if shift else ids[:, :-1]).clone()  # shift=False: the planted bug

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return {
            "input_ids": self.input_ids[i],
            "targets": self.targets[i],
            "loss_mask": torch.ones(LENGTH, dtype=torch.bool),
        }

    def record(self, i):
        return self.records[i]


class MutatingDataset(LMDataset):
    """BUG: every read increments the stored targets in place, so the same index never reads the same."""

    def __getitem__(self, i):
        self.targets[i].add_(1).remainder_(TOKENIZER.vocab_size)
        return super().__getitem__(i)


class MisalignedRecords(LMDataset):
    """BUG: record(i) is the source of row i + 1."""

    def record(self, i):
        return self.records[(i + 1) % len(self.records)]


class LoaderModule:
    """What the data checks use of a datamodule: train/val loaders over datasets, and a tokenizer."""

    def __init__(self, train: Dataset, val: Dataset, shuffle_train: bool = False, batch_size: int = 2):
        self.train_dataset, self.val_dataset, self.tokenizer = train, val, TOKENIZER
        self.shuffle_train, self.batch_size = shuffle_train, batch_size

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        return DataLoader(
            self.train_dataset, batch_size=self.batch_size, shuffle=self.shuffle_train, generator=generator
        )

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=self.batch_size, shuffle=False)


def clean_module(shuffle_train: bool = False) -> LoaderModule:
    return LoaderModule(LMDataset(TEXTS[:6]), LMDataset(TEXTS[6:]), shuffle_train=shuffle_train)


@pytest.mark.parametrize("shuffle_train", [False, True], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("check", checks.DATA_CHECKS, ids=lambda c: c.__name__)
def test_bug_free_loaders_pass(check, shuffle_train):
    result = check(None, clean_module(shuffle_train), CFG)
    assert result.status == PASS, result


def test_static_batches_catches_in_place_mutation():
    data = LoaderModule(LMDataset(TEXTS[:6]), MutatingDataset(TEXTS[6:]))
    result = checks.static_batches(None, data, CFG)
    assert result.status == FAIL, result
    # input_ids and loss_mask sort before targets and are static: the detail must single out targets
    assert "val loader" in result.detail and "key 'targets'" in result.detail, result.detail


def test_static_batches_lets_a_declared_key_vary():
    allowed = checks.static_batches(
        None,
        LoaderModule(LMDataset(TEXTS[:6]), MutatingDataset(TEXTS[6:])),
        {"seed": 0, "static_batches_vary": ["targets"]},
    )
    assert allowed.status == PASS, allowed


ROUNDTRIP_BUGS = [
    pytest.param(
        lambda: LoaderModule(LMDataset(TEXTS[:6], shift=False), LMDataset(TEXTS[6:])),
        ("train example 0", "inputs themselves"),
        id="targets-not-shifted",
    ),
    pytest.param(  # read through the shuffled loader's own sampler: the row names the example it holds
        lambda: LoaderModule(LMDataset(TEXTS[:6], shift=False), LMDataset(TEXTS[6:]), shuffle_train=True),
        ("train example ", "inputs themselves"),
        id="targets-not-shifted-behind-a-shuffled-loader",
    ),
    pytest.param(
        lambda: LoaderModule(LMDataset(TEXTS[:6]), MisalignedRecords(TEXTS[6:])),
        ("val example 0", "example 1's source"),
        id="record-disagrees-with-tensors",
    ),
]


@pytest.mark.parametrize(("make", "named"), ROUNDTRIP_BUGS)
def test_data_roundtrip_catches_broken_decoding(make, named):
    result = checks.data_roundtrip(None, make(), CFG)
    assert result.status == FAIL, result
    assert all(words in result.detail for words in named), result.detail


# ---------------------------------------------------------------------------------------------------------
# 1c. a twin whose vectorized version disagrees with its loop version
# ---------------------------------------------------------------------------------------------------------


def twin_gaps(cls, tolerance: float = 1e-4) -> list[str]:
    """One line per test shape where `cls`'s loop and vectorized versions differ by more than `tolerance`."""
    failures = []
    for k, shape in enumerate(cls.test_shapes):
        inputs = cls.example_inputs(torch.Generator().manual_seed(k), **shape)
        twin = cls(vectorize=True)
        with torch.no_grad():
            expected, got = twin.loop(*inputs), twin.vectorized(*inputs)
        largest = max_difference(expected, got)
        if not largest <= tolerance:  # also catches nan
            failures.append(
                f"{cls.__name__} at {shape}: largest difference {largest:.3e}, "
                f"mean {mean_difference(expected, got):.3e} (tolerance {tolerance})"
            )
    return failures


def _flat(x) -> torch.Tensor:
    if isinstance(x, (tuple, list)):
        return torch.cat([_flat(y) for y in x])
    return x.detach().double().flatten()


def mean_difference(a, b) -> float:
    a, b = _flat(a), _flat(b)
    return (a - b).abs().mean().item() if a.shape == b.shape and a.numel() else float("nan")


def test_twins_check_names_the_twin_that_disagrees():
    class PlantedPrefixSum(Twin):
        """out[t] = x[0] + ... + x[t]; BUG: the vectorized version is the exclusive sum (misses x[t])."""

        test_shapes = ({"b": 2, "time": 5}, {"b": 1, "time": 9})

        def loop(self, x):
            return torch.stack([x[:, : t + 1].sum(dim=1) for t in range(x.shape[1])], dim=1)

        def vectorized(self, x):
            return x.cumsum(dim=1) - x

        @classmethod
        def example_inputs(cls, generator, b, time):
            return (torch.randn(b, time, generator=generator),)

    try:
        assert PlantedPrefixSum in registered()
        result = checks.twins()
        assert result.status == FAIL, result
        assert "PlantedPrefixSum" in result.detail, result.detail
        gaps = twin_gaps(PlantedPrefixSum)  # the equivalence test below would catch it too
        assert len(gaps) == len(PlantedPrefixSum.test_shapes), gaps
    finally:
        del PlantedPrefixSum
        gc.collect()
    assert "PlantedPrefixSum" not in [cls.__name__ for cls in registered()], "the planted twin leaked"
    assert checks.twins().status == PASS


# ---------------------------------------------------------------------------------------------------------
# 1d. edge cases the checks once missed
# ---------------------------------------------------------------------------------------------------------


def test_model_that_ignores_its_input_is_no_leak(lm_batch):
    """Nothing moves: the leak checks cannot judge and say so (a WARN pointing at input_dependence, which
    FAILs)."""
    model = build(IgnoresInput, VOCAB)
    for check in (checks.causality, checks.batch_independence):
        result = check(model, lm_batch, CFG)
        assert result.status == WARN and "input_dependence" in result.detail, result


def test_twin_whose_vectorized_version_returns_nan():
    class PlantedNaNTwin(Twin):
        test_shapes = ({"n": 3},)

        def loop(self, x):
            return x

        def vectorized(self, x):
            return x * float("nan")

        @classmethod
        def example_inputs(cls, generator, n):
            return (torch.randn(n, generator=generator),)

    try:
        result = checks.twins()
        assert twin_gaps(PlantedNaNTwin), "the equivalence test below does catch it"
    finally:
        del PlantedNaNTwin
        gc.collect()
    assert "PlantedNaNTwin" not in [cls.__name__ for cls in registered()], "the planted twin leaked"
    assert result.status == FAIL and "PlantedNaNTwin" in result.detail, result


def test_classification_of_length_one(tmp_path):
    data = SyntheticDataModule(length=1, size=4, val_size=2, root=str(tmp_path))
    data.prepare_data()
    data.setup()
    result = checks.data_roundtrip(None, data, CFG)
    assert result.status == PASS, result


# ---------------------------------------------------------------------------------------------------------
# 2. no false alarm on the built-in models and data
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    data = SyntheticDataModule(length=12, size=16, val_size=4, root=str(tmp_path_factory.mktemp("synthetic")))
    data.prepare_data()
    data.setup()
    return data


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    data = TextDataModule(length=16, root=str(tmp_path_factory.mktemp("text")))
    data.prepare_data()
    data.setup()
    return data


MODELS = {  # the hyper-parameters of conf/model/*.yaml
    "transformer": lambda vocab, length, vectorize: Transformer(
        vocab, max_len=length, d_model=64, layers=2, heads=4, dropout=0.0, vectorize=vectorize
    ),
    "rnn": lambda vocab, length, vectorize: RNN(vocab, d_model=64, layers=1, vectorize=vectorize),
    "lstm": lambda vocab, length, vectorize: LSTM(vocab, d_model=64, layers=1, vectorize=vectorize),
}


def builtin(name: str, data, vectorize: bool = True) -> nn.Module:
    torch.manual_seed(0)
    if (
        name == "transformer" and not vectorize
    ):  # the loop attention costs b * heads * time^2 Python steps a layer
        return Transformer(
            data.tokenizer.vocab_size, max_len=data.length, d_model=16, layers=1, heads=2, vectorize=False
        )
    return MODELS[name](data.tokenizer.vocab_size, data.length, vectorize)


@pytest.mark.parametrize("check", checks.MODEL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("data_name", ["synthetic", "text"])
def test_no_false_alarm_on_builtin_models(data_name, model_name, check, request):
    data = request.getfixturevalue(data_name)
    result = check(builtin(model_name, data), checks.sample_batch(data.train_dataset, 4), CFG)
    assert result.status == PASS, result


@pytest.mark.parametrize(
    "check", [checks.gradient_flow, checks.causality, checks.batch_independence], ids=lambda c: c.__name__
)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_no_false_alarm_with_loop_twins(model_name, check, synthetic):
    result = check(
        builtin(model_name, synthetic, vectorize=False), checks.sample_batch(synthetic.train_dataset, 4), CFG
    )
    assert result.status == PASS, result


@pytest.mark.parametrize("check", checks.DATA_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("data_name", ["synthetic", "text"])
def test_no_false_alarm_on_builtin_data(data_name, check, request):
    data = request.getfixturevalue(data_name)
    result = check(builtin("rnn", data), data, CFG)
    assert result.status == PASS, result


def test_no_false_alarm_on_transformer_with_dropout(synthetic):
    """Dropout is randomness that seeding reaches: determinism must still pass."""
    torch.manual_seed(0)
    model = Transformer(synthetic.tokenizer.vocab_size, max_len=synthetic.length, dropout=0.1)
    result = checks.determinism(model, checks.sample_batch(synthetic.train_dataset, 4), CFG)
    assert result.status == PASS, result


def test_no_false_alarm_on_builtin_twins():
    result = checks.twins()
    assert result.status == PASS, result


# ---------------------------------------------------------------------------------------------------------
# 3. the twins: loop and vectorized agree on every registered twin, every test shape, value and gradient
# ---------------------------------------------------------------------------------------------------------

TWINS = registered()  # the built-in twins (importing harness.ops loaded them); planted ones come and go


def test_builtin_twins_are_registered():
    assert CausalAttention in TWINS  # the gradient test below covers it
    names = {cls.__name__ for cls in TWINS}
    assert {"CausalAttention", "LSTMScan", "MaskedCrossEntropy", "TanhScan"} <= names, names
    assert all(cls.test_shapes for cls in TWINS), "a twin without test shapes is never compared"


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_twin_loop_and_vectorized_agree(cls):
    failures = twin_gaps(cls, tolerance=1e-4)
    assert not failures, "\n".join(failures)


def _gradients(version, inputs, generator: torch.Generator):
    """Gradients of a random projection of version(*inputs) w.r.t. its float inputs and module parameters."""
    inputs, leaves, prepared = copy.deepcopy(inputs), [], []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = x.detach().clone().requires_grad_(True)
            leaves.append(x)
        elif isinstance(x, nn.Module):
            leaves.extend(x.parameters())
        prepared.append(x)
    out = version(*prepared)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    loss = sum((o * torch.randn(o.shape, generator=generator, dtype=o.dtype)).sum() for o in outs)
    return torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_twin_gradients_agree(cls):
    for k, shape in enumerate(cls.test_shapes[:3]):
        inputs = cls.example_inputs(torch.Generator().manual_seed(k), **shape)
        twin = cls(vectorize=True)
        expected = _gradients(twin.loop, inputs, torch.Generator().manual_seed(100 + k))
        got = _gradients(twin.vectorized, inputs, torch.Generator().manual_seed(100 + k))
        assert expected, f"{cls.__name__} at {shape}: nothing to differentiate"
        largest = max_difference(expected, got)
        assert largest <= 1e-4, (
            f"{cls.__name__} at {shape}: gradients differ by up to {largest:.3e}, "
            f"mean {mean_difference(expected, got):.3e}"
        )


@pytest.mark.parametrize("cls", TWINS, ids=lambda cls: cls.__name__)
def test_loop_version_warns_once_and_vectorized_never(cls, caplog):
    inputs = cls.example_inputs(torch.Generator().manual_seed(0), **cls.test_shapes[0])
    with caplog.at_level(logging.WARNING, logger="harness.ops"):
        slow = cls(vectorize=False)
        slow(*inputs)
        slow(*inputs)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert cls.__name__ in warnings[0].getMessage() and "loop" in warnings[0].getMessage()

        caplog.clear()
        fast = cls(vectorize=True)
        fast(*inputs)
        fast(*inputs)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_harness_twins_exports_every_builtin_twin():
    exported = {getattr(harness.ops, name) for name in harness.ops.__all__}
    assert {cls for cls in TWINS if cls.__module__.startswith("harness.")} <= exported


class CountsCalls(TinyLM):
    """TinyLM, counting its forward passes."""

    def __init__(self, vocab_size: int, d_model: int = WIDTH):
        super().__init__(vocab_size, d_model)
        self.calls = 0

    def forward(self, input_ids):
        self.calls += 1
        return super().forward(input_ids)


def test_checks_share_their_passes_over_a_sample_batch(lm_batch):
    """On the preflight's batch (a SampleBatch) the seeded train-mode pass and the eval pass run once for all
    the checks that read them: fewer forward passes than on a plain dict, where each check runs its own."""
    counts = {}
    for kind, batch in (("plain", dict(lm_batch)), ("sample", checks.result.SampleBatch(lm_batch))):
        model = build(CountsCalls, VOCAB)
        results = [check(model, batch, CFG) for check in checks.MODEL_CHECKS]
        assert all(r.status == PASS for r in results), results
        counts[kind] = model.calls
    # gradient_flow, determinism, finite, the four leak checks and the three architecture checks (which read the
    # output head off it) share one train pass; init_loss and global_rng one eval pass; residual,
    # attention_scale and stable_log_probs one watched eval pass
    assert counts["plain"] - counts["sample"] == 12, counts


def test_a_sample_batch_never_serves_one_model_the_passes_of_another(lm_batch):
    batch = checks.result.SampleBatch(lm_batch)
    assert checks.finite(build(TinyLM, VOCAB), batch, CFG).status == PASS
    assert checks.finite(build(EmitsInf, VOCAB), batch, CFG).status == FAIL
