"""What the tests of real LLM code share (tests/forks/real_models/: Hugging Face architectures built from their
configs, MiniGPT, an x-transformers decoder): synthetic and text data at the lengths they use, a model built
for that data, one check run by name, and CORRECT, every correct model they are checked on."""

from __future__ import annotations

import pytest
import torch

from harness import checks
from harness.data import SyntheticDataModule, TextDataModule
from harness.models import LSTM, RNN, Transformer
from tests.forks import real_models as rm

CFG = {"seed": 0}
SYNTHETIC_LENGTH, TEXT_LENGTH = 16, 24


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    data = SyntheticDataModule(
        length=SYNTHETIC_LENGTH, size=16, val_size=4, root=str(tmp_path_factory.mktemp("synthetic"))
    )
    data.prepare_data()
    data.setup("fit")
    return data


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    data = TextDataModule(length=TEXT_LENGTH, root=str(tmp_path_factory.mktemp("text")))
    data.prepare_data()
    data.setup("fit")
    return data


def build(make, data) -> torch.nn.Module:
    torch.manual_seed(0)
    return make(data.tokenizer.vocab_size, data.length)


def run_check(name: str, model, batch) -> checks.CheckResult:
    """The check called `name` (looked up when run: a missing check fails its own tests alone)."""
    check = getattr(checks, name, None)
    assert check is not None, f"harness.checks has no check {name!r}"
    assert check in checks.MODEL_CHECKS, f"{name} is not in MODEL_CHECKS: the preflight would never run it"
    return check(model, batch, CFG)


CORRECT = {  # (vocab_size, length, dropout) -> a correct model; rnn and lstm have no dropout
    "hf-gpt2": lambda vocab, length, p=0.0: rm.hf(vocab, "gpt2", length, dropout=p),
    "hf-llama": lambda vocab, length, p=0.0: rm.hf(vocab, "llama", length, dropout=p),
    "hf-qwen2": lambda vocab, length, p=0.0: rm.hf(vocab, "qwen2", length, dropout=p),
    "hf-gpt2-zeroed-c_proj": rm.gpt2_zeroed_c_proj,
    "hf-llama-wide": lambda vocab, length, p=0.0: rm.hf(vocab, "llama", length, d_model=256, dropout=p),
    "minigpt-learned": lambda vocab, length, p=0.0: rm.MiniGPT(vocab, max_len=length, dropout=p),
    "minigpt-rope": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, positions="rope", dropout=p
    ),
    "minigpt-zero-init-residual": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, zero_init_residual=True, dropout=p
    ),
    "minigpt-layerscale": lambda vocab, length, p=0.0: rm.MiniGPT(
        vocab, max_len=length, layerscale=True, dropout=p
    ),
    "minigpt-wide": lambda vocab, length, p=0.0: rm.MiniGPT(vocab, max_len=length, d_model=256, dropout=p),
    "x-transformers-rotary": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="rotary", dropout=p
    ),
    "x-transformers-alibi": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="alibi", dropout=p
    ),
    "x-transformers-absolute-glu-dropout": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, positions="absolute", ff_glu=True, dropout=p or 0.1
    ),
    "x-transformers-qk-norm": lambda vocab, length, p=0.0: rm.XDecoder(
        vocab, max_len=length, attn_qk_norm=True, dropout=p
    ),
    "transformer": lambda vocab, length, p=0.0: Transformer(
        vocab, max_len=length, d_model=32, layers=2, heads=4, dropout=p
    ),
    "rnn": lambda vocab, length, p=0.0: RNN(vocab, d_model=32),
    "lstm": lambda vocab, length, p=0.0: LSTM(vocab, d_model=32),
}
#: the correct models that have a dropout rate to set
WITH_DROPOUT = [name for name in CORRECT if name not in ("rnn", "lstm")]


def minigpt(cls, **kwargs):
    return lambda vocab, length: cls(vocab, max_len=length, **kwargs)


def hf_bug(cls, arch: str):
    return lambda vocab, length: cls(vocab, arch=arch, max_len=length, d_model=32, layers=2, heads=4)
