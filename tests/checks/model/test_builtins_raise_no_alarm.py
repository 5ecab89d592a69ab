"""No false alarm: every check passes on every built-in model, on synthetic and on text data, with the twins
vectorized and (for the model checks) with their loop versions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness import checks
from harness.checks import PASS
from harness.data import SyntheticDataModule, TextDataModule
from harness.models import LSTM, RNN, Transformer

CFG = {"seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


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
