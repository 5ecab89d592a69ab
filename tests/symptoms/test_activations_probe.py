"""The activations probe the symptoms read: logged on its steps for the modules picked, the training forwards'
own statistics, read wherever and however a forward calls an activation function."""

from __future__ import annotations

import copy
import csv

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from harness.train.module import HarnessModule
from tests.conftest import needs_probes
from tests.forks.sick_models import NegativeBiasReLU

pytest.importorskip("harness.probes", reason="this project has no probes")  # a fork may delete them
from harness.probes import ProbeSet  # noqa: E402
from harness.probes.layers.activations import Activations  # noqa: E402
from tests.symptoms.conftest import _run

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]


# the activations probe


def test_activations_are_logged_on_their_steps_only_for_the_modules_picked(tmp_path_factory, data_root):
    run_dir, verdict = _run(
        tmp_path_factory,
        data_root,
        "acts",
        "model._target_=tests.forks.sick_models.SaturatedTanh",
        "mode.max_steps=12",
        "mode.target_loss=0",
        "probes.activations.every=5",
        "probes.activations.exclude=[head]",
    )
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = {int(r["step"]) for r in rows if r.get("act/net.1/saturated")}
    assert logged == {0, 5, 10}, logged
    header = set(rows[0])
    assert {"act/net.0/rms", "act/net.0/mean", "act/net.1/saturated", "act/token_embedding/rms"} <= header
    assert not [k for k in header if k.startswith("act/head")] and "act/net.0/saturated" not in header
    first = next(r for r in rows if r.get("act/net.1/saturated"))
    assert 0 <= float(first["act/net.1/saturated"]) <= 1 and float(first["act/net.1/rms"]) <= 1


def activation_rows(model: nn.Module, every: int, steps: int) -> tuple[dict[int, dict], list[dict]]:
    """`model` (vocabulary 12) fit `steps` steps on random batches of 2 x 7 tokens with the activations probe
    alone, reading every `every` steps: the rows it logged, by step, and the batches."""
    ids = torch.randint(0, 12, (steps, 2, 8))
    batches = [
        {"input_ids": x[:, :-1], "targets": x[:, 1:], "loss_mask": torch.ones(2, 7, dtype=torch.bool)}
        for x in ids
    ]
    probes = ProbeSet([Activations(every=every)])
    rows: dict[int, dict] = {}
    probes.sink.listen(lambda step, row: rows.setdefault(step, dict(row)))
    trainer = pl.Trainer(
        max_steps=steps,
        callbacks=[probes],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(HarnessModule(model), train_dataloaders=DataLoader(batches, batch_size=None))
    return rows, batches


def test_activation_statistics_are_the_training_forwards_own():
    """Logged on steps 0 and 2 only, and step 0's numbers are those of the model's forward on that batch."""
    torch.manual_seed(0)
    model = NegativeBiasReLU(vocab_size=12, bias=0.0)  # bias 0: about half the ReLU's outputs are zero
    before = copy.deepcopy(model)
    rows, batches = activation_rows(model, every=2, steps=3)
    assert sorted(rows) == [0, 2], sorted(rows)
    with torch.no_grad():
        x = before.token_embedding(batches[0]["input_ids"])
        linear = before.net[0](x)
        relu = before.net[1](linear)
    assert rows[0]["act/net.1/zero_frac"] == pytest.approx((relu == 0).float().mean().item())
    assert 0.25 < rows[0]["act/net.1/zero_frac"] < 0.75
    assert rows[0]["act/net.0/rms"] == pytest.approx(linear.square().mean().sqrt().item(), rel=1e-5)
    assert rows[0]["act/net.0/mean"] == pytest.approx(linear.mean().item(), rel=1e-4, abs=1e-6)
    assert rows[0]["act/net/rms"] == pytest.approx(relu.square().mean().sqrt().item(), rel=1e-5)
    assert "act/net.0/zero_frac" not in rows[0] and "act/head/rms" in rows[0]
    assert not [m for m in model.modules() if m._forward_hooks], "hooks left behind"


class Calls(nn.Module):
    """A module calling activations as functions, and holding a ReLU module (whose own F.relu is its hook's)."""

    def __init__(self):
        super().__init__()
        self.linear, self.relu = nn.Linear(8, 8), nn.ReLU()

    def forward(self, x):
        y = self.linear(x)
        return torch.tanh(y) + F.gelu(y) + y.sigmoid() + self.relu(y)


class CallsFunctions(nn.Module):
    def __init__(self, vocab_size: int = 12):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, 8)
        self.net = Calls()
        self.head = nn.Linear(8, vocab_size)

    def forward(self, input_ids):
        x = self.net(self.token_embedding(input_ids))
        return self.head(torch.relu(x))  # in the model's own forward


def test_activation_functions_are_read_where_they_are_called():
    """Each function's statistics are its output's in the training forward, keyed by the module that calls it
    (`forward` for the model's own); a ReLU module's inner F.relu is not read twice; nothing is left behind."""
    torch.manual_seed(0)
    model = CallsFunctions()
    before = copy.deepcopy(model)
    rows, batches = activation_rows(model, every=2, steps=2)
    row = rows[0]
    with torch.no_grad():
        y = before.net.linear(before.token_embedding(batches[0]["input_ids"]))
        out = before.net(before.token_embedding(batches[0]["input_ids"]))
    assert row["act/net/tanh/saturated"] == pytest.approx((y.tanh().abs() > 0.97).float().mean().item())
    assert row["act/net/gelu/rms"] == pytest.approx(F.gelu(y).square().mean().sqrt().item(), rel=1e-5)
    assert row["act/net/sigmoid/mean"] == pytest.approx(y.sigmoid().mean().item(), rel=1e-5)
    assert row["act/forward/relu/zero_frac"] == pytest.approx((out.relu() == 0).float().mean().item())
    functions = {k.rsplit("/", 1)[0] for k in row if k.count("/") == 3}
    assert functions == {"act/net/tanh", "act/net/gelu", "act/net/sigmoid", "act/forward/relu"}, functions
    assert "act/net.relu/zero_frac" in row  # the ReLU module: read by its hook alone, not by its F.relu too
    assert sorted(rows) == [0] and not [
        m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks
    ]
    assert not torch.overrides._get_current_function_mode_stack(), "a mode left on"


#: every way a forward calls an activation -> the key it is read under (`act/net/<key>/...`) and its statistic
CALLED = {
    "torch.relu": (torch.relu, "relu", "zero_frac"),
    "F.relu": (F.relu, "relu", "zero_frac"),
    "F.relu inplace": (lambda x: F.relu(x, inplace=True), "relu", "zero_frac"),
    "x.relu()": (lambda x: x.relu(), "relu", "zero_frac"),
    "x.relu_()": (lambda x: x.relu_(), "relu", "zero_frac"),
    "F.gelu": (F.gelu, "gelu", "dead_frac"),
    "F.gelu tanh": (lambda x: F.gelu(x, approximate="tanh"), "gelu", "dead_frac"),
    "F.silu": (F.silu, "silu", "dead_frac"),
    "F.leaky_relu": (F.leaky_relu, "leaky_relu", "dead_frac"),
    "torch.tanh": (torch.tanh, "tanh", "saturated"),
    "F.tanh": (F.tanh, "tanh", "saturated"),
    "x.tanh()": (lambda x: x.tanh(), "tanh", "saturated"),
    "torch.sigmoid": (torch.sigmoid, "sigmoid", "saturated"),
    "F.sigmoid": (F.sigmoid, "sigmoid", "saturated"),
    "x.sigmoid()": (lambda x: x.sigmoid(), "sigmoid", "saturated"),
    "torch.special.expit": (torch.special.expit, "sigmoid", "saturated"),
}


@pytest.mark.parametrize("form", list(CALLED))
def test_an_activation_is_read_however_the_forward_calls_it(form):
    from tests.forks.sick_models import Layer, Stack

    function, key, statistic = CALLED[form]
    torch.manual_seed(0)
    model = Stack(12, 8, nn.Sequential())
    model.net = Layer(8, function)
    rows, _ = activation_rows(model, every=1, steps=1)
    assert f"act/net/{key}/{statistic}" in rows[0], sorted(k for k in rows[0] if k.startswith("act/net"))


class TanhFromItsThirdForward(nn.Module):
    """Activation modules only (a ReLU, whose own F.relu is its hook's), until its third training forward: from
    then on its forward calls torch.tanh too (a path a flag opens)."""

    def __init__(self, vocab_size: int = 12):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, 8)
        self.linear, self.relu = nn.Linear(8, 8), nn.ReLU()
        self.head = nn.Linear(8, vocab_size)
        self.forwards = 0

    def forward(self, input_ids):
        self.forwards += self.training
        x = self.relu(self.linear(self.token_embedding(input_ids)))
        return self.head(torch.tanh(x) if self.forwards >= 3 else x)


def test_a_model_that_called_no_activation_function_is_watched_again_every_recheck_readings():
    """Watching the functions costs a dispatch per torch call of the forward: after a reading that saw none the
    probe looks again every RECHECK readings only, and at every reading once it sees one."""
    from harness.probes.layers.activations import RECHECK

    torch.manual_seed(0)
    model = TanhFromItsThirdForward()
    rows, _ = activation_rows(model, every=1, steps=RECHECK + 2)
    watched = [step for step, row in sorted(rows.items()) if "act/forward/tanh/rms" in row]
    # step 0 saw no function (relu, a module, is its hook's); from step 2 on the model calls tanh, seen when the
    # probe looks again at reading RECHECK, and at every reading after that
    assert watched == list(range(RECHECK, RECHECK + 2)), watched
    assert all("act/relu/rms" in row for row in rows.values()) and sorted(rows) == list(range(RECHECK + 2))
