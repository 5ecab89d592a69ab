"""Symptoms: a planted runtime bug for each one, found with its name and where; silence on healthy runs; the
activations probe they read; the record, the SYMPTOM verdict and exit 5."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from harness.report.symptoms import SUGGESTIONS, Symptom, judge
from harness.report.verdict import Verdict, exit_code
from harness.tasks.training import run
from harness.train.module import HarnessModule
from tests.conftest import compose_config, needs_probes
from tests.sick_models import NegativeBiasReLU

pytest.importorskip("harness.probes", reason="this project has no probes")  # a fork may delete them
from harness.probes import ProbeSet  # noqa: E402
from harness.probes.detectors import blocks_of  # noqa: E402
from harness.probes.layers.activations import Activations, kind_of  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]

QUICK = ["preflight=false", "probes.plots=false", "probes.datapoints=null", "probes.embeddings=null"]


def _run(tmp_path_factory, data_root, name: str, *overrides: str) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp(name)
    return run_dir, run(compose_config([*QUICK, *overrides], run_dir, data_root))


def found(verdict: dict, name: str) -> list[dict]:
    return [s for s in verdict["symptoms"] if s["name"] == name]


def names(verdict: dict) -> set[str]:
    return {s["name"] for s in verdict["symptoms"]}


# planted bugs: each symptom, with the right name and `where`


def test_a_deep_sigmoid_stack_has_vanishing_gradients_named_at_its_first_block(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "sigmoid",
        "model._target_=tests.sick_models.DeepSigmoid",
        "mode.max_steps=40",
    )
    [symptom] = found(verdict, "vanishing_gradients")
    assert symptom["where"] == "net.0" and symptom["value"] < 1e-3, symptom
    assert symptom["step"] == 20 and "net.18" in symptom["detail"] and symptom["suggestion"], symptom


def test_a_relu_with_a_large_negative_bias_has_dead_units_named_by_module(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "relu",
        "model._target_=tests.sick_models.NegativeBiasReLU",
        "mode.max_steps=60",
        "mode.target_loss=0",
    )
    [symptom] = found(verdict, "dead_units")
    assert symptom["where"] == "net.1" and symptom["value"] == 1.0, symptom
    # the layer before it gets no gradient through it: the sentinel names its parameters too
    assert {s["where"] for s in found(verdict, "dead_params")} == {"net.0.weight", "net.0.bias"}, verdict
    assert sorted(verdict["dead_params"]) == ["net.0.bias", "net.0.weight"]


def test_a_silu_with_a_large_negative_bias_has_dead_units_though_no_output_is_exactly_zero(
    tmp_path_factory, data_root
):
    run_dir, verdict = _run(
        tmp_path_factory,
        data_root,
        "silu",
        "model._target_=tests.sick_models.NegativeBiasSiLU",
        "mode.max_steps=60",
        "mode.target_loss=0",
    )
    [symptom] = found(verdict, "dead_units")
    assert symptom["where"] == "net.1" and "units dead" in symptom["detail"], symptom
    with open(run_dir / "metrics.csv") as f:
        first = next(r for r in csv.DictReader(f) if r.get("act/net.1/dead_frac"))
    assert float(first["act/net.1/zero_frac"]) == 0 and float(first["act/net.1/dead_frac"]) == 1.0, first


def test_a_tanh_layer_with_weights_far_too_large_is_saturated(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "tanh",
        "model._target_=tests.sick_models.SaturatedTanh",
        "+model.scale=100",
        "mode.max_steps=60",
        "mode.target_loss=0",
    )
    [symptom] = found(verdict, "saturated_activations")
    assert symptom["where"] == "net.1" and symptom["value"] > 0.9, symptom


# the same illnesses where the activation is a function called in a forward: named by the module that calls it


@pytest.mark.parametrize(
    ("model", "where", "least"),
    [
        (["model._target_=tests.sick_models.FunctionalTanh", "+model.scale=100"], "net/tanh", 0.9),
        (["model._target_=tests.sick_models.FunctionalTanh", "+model.scale=30"], "net/tanh", 0.6),
        (
            ["model=hf", "model._target_=tests.sick_models.GPT2SaturatedTanh"],
            "lm.transformer.h.0.mlp/tanh",
            0.9,
        ),
        (["model=rnn", "model._target_=tests.sick_models.saturated_rnn"], "recurrence", 0.6),
    ],
    ids=["stack", "stack-30x", "hf-gpt2", "built-in-rnn"],
)
def test_a_tanh_called_as_a_function_with_weights_far_too_large_is_saturated(
    model, where, least, tmp_path_factory, data_root
):
    """As a function, or inside torch's nn.RNN (its output sequence is the tanh's); 30 times too large leaves
    two thirds to four fifths of the outputs saturated, far above a tanh RNN memorizing text (up to 0.48)."""
    _, verdict = _run(
        tmp_path_factory, data_root, "tanh_fn", *model, "mode.max_steps=60", "mode.target_loss=0"
    )
    [symptom] = [s for s in found(verdict, "saturated_activations") if s["where"] == where]  # hf: one a layer
    assert symptom["where"] == where and symptom["value"] >= least, symptom
    if "/" not in where:
        return
    owner = where.split("/")[0]
    assert f"tanh called as a function in the forward of {owner}: " in symptom["detail"], symptom


@pytest.mark.parametrize(
    ("model", "where"),
    [
        (["model._target_=tests.sick_models.FunctionalReLU"], "net/relu"),
        (["model._target_=tests.sick_models.DeadReLUNet"], "forward/relu"),
        (["model=hf", "model._target_=tests.sick_models.LlamaDeadReLU"], "lm.model.layers.0.mlp/relu"),
    ],
    ids=["stack", "named-relu", "hf-llama"],
)
def test_a_relu_called_as_a_function_behind_a_large_negative_bias_has_dead_units(
    model, where, tmp_path_factory, data_root
):
    """Not only dead_params (the layer before it gets no gradient): dead_units, named by where relu is called."""
    _, verdict = _run(
        tmp_path_factory, data_root, "relu_fn", *model, "mode.max_steps=60", "mode.target_loss=0"
    )
    [symptom] = [s for s in found(verdict, "dead_units") if s["where"] == where]  # hf: one a layer
    assert symptom["where"] == where and symptom["value"] == 1.0, symptom
    assert "relu called as a function in the" in symptom["detail"], symptom
    assert found(verdict, "dead_params"), verdict["symptoms"]


def test_an_init_far_too_large_explodes_the_gradients(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "huge",
        "model._target_=tests.sick_models.HugeInit",
        "mode.max_steps=5",
        "mode.target_loss=0",
    )
    [symptom] = found(verdict, "exploding_gradients")
    assert symptom["where"] == "grad_norm/total" and symptom["value"] > 1e3 and symptom["step"] == 2, symptom


def test_a_learning_rate_far_too_high_explodes_the_gradients(tmp_path_factory, data_root):
    _, verdict = _run(tmp_path_factory, data_root, "lr_high", "optim.lr=30", "mode.max_steps=40")
    [symptom] = found(verdict, "exploding_gradients")
    assert symptom["where"] == "grad_norm/total" and symptom["value"] > 1000, symptom
    assert verdict["status"] == "FAIL"


def test_a_loss_that_spikes_and_spikes_again_is_a_loss_spike(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "spike",
        "model._target_=tests.sick_models.RecurringSpike",
        "mode.max_steps=100",
        "mode.target_loss=0",
        "optim.lr=3e-4",  # slow enough that 5 examples are still being learnt at the spikes
        "n=5",
    )
    [spike] = found(verdict, "loss_spike")
    assert spike["where"] == "train/loss" and "2 times within 100 steps" in spike["detail"], spike
    # its 40th training-mode forward (the probes' own forwards count too) is the first spike
    assert 30 <= spike["step"] <= 40 and spike["value"] > 10, spike


def test_a_learning_rate_far_too_low_makes_no_progress_and_tiny_updates(tmp_path_factory, data_root):
    _, verdict = _run(tmp_path_factory, data_root, "lr_low", "optim.lr=1e-8", "mode.max_steps=110")
    [stalled] = found(verdict, "no_progress")
    assert stalled["where"] == "train/loss" and stalled["step"] >= 99 and abs(stalled["value"]) < 0.05, (
        stalled
    )
    [ratio] = found(verdict, "update_ratio")
    assert ratio["where"].endswith(".weight") and ratio["value"] < 1e-5, ratio
    assert "raise the learning rate" in ratio["suggestion"] and "more of the" in ratio["detail"], ratio
    assert verdict["status"] == "FAIL"


def test_a_learning_rate_far_too_high_for_its_weights_has_a_high_update_ratio(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "sgd_high",
        "optim=sgd",
        "optim.lr=30",
        "trainer.gradient_clip_val=1.0",
        "mode.max_steps=40",
        "probes.norms.ratio_every=1",
        "probes.symptoms.every=1",
    )
    [ratio] = found(verdict, "update_ratio")
    assert ratio["value"] > 1 and "lower the learning rate" in ratio["suggestion"], ratio


def test_the_tanh_rnn_at_length_200_reports_vanishing_gradients_by_reach(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "rnn200",
        "model=rnn",
        "data.length=200",
        "data.rule=first_token",
        "n=2",
        "mode.max_steps=20",
        "mode.target_loss=0",
        "probes.grad_by_position.every=10",
    )
    [symptom] = found(verdict, "vanishing_gradients")
    assert symptom["where"] == "input positions (grad_by_position)" and symptom["value"] == 0, symptom
    assert verdict["reach_final"] == 0


def test_a_nonfinite_gradient_is_listed_as_a_symptom_and_logged_too(tmp_path_factory, data_root, caplog):
    run_dir, verdict = _run(
        tmp_path_factory, data_root, "nan", "model=rnn", "model._target_=tests.fork_models.ExplodingGRU"
    )
    assert verdict["status"] == "NONFINITE"
    [symptom] = found(verdict, "nonfinite")
    assert (symptom["where"], symptom["step"]) == (
        verdict["nonfinite"]["where"],
        verdict["nonfinite"]["step"],
    )
    with open(run_dir / "metrics.csv") as f:
        logged = [r["step"] for r in csv.DictReader(f) if r.get("symptoms/nonfinite")]
    assert logged == [str(symptom["step"])], logged
    assert [r for r in caplog.records if r.getMessage().startswith("symptom nonfinite in ")]


# silence where nothing is wrong (the slow tests cover every built-in model and data source)


def test_a_healthy_overfit_run_reports_nothing_and_logs_no_symptom(tmp_path_factory, data_root):
    run_dir, verdict = _run(tmp_path_factory, data_root, "healthy", "n=2")
    assert verdict["status"] == "PASS" and verdict["symptoms"] == [], verdict["symptoms"]
    with open(run_dir / "metrics.csv") as f:
        header = next(csv.reader(f))
    assert not [k for k in header if k.startswith("symptoms/")], header


# where the symptoms go: verdict, console, every logger; SYMPTOM and exit 5


def test_symptoms_reach_every_logger_and_the_console(tmp_path_factory, data_root, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, verdict = _run(
        tmp_path_factory,
        data_root,
        "loggers",
        "model._target_=tests.sick_models.NegativeBiasReLU",
        "mode.max_steps=60",
        "mode.target_loss=0",
        "logger=[csv,tensorboard]",
    )
    assert "dead_units" in names(verdict)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows if r.get("symptoms/dead_units")] == ["40"], (
        "dead_units logged at its step"
    )
    events = EventAccumulator(str(next((run_dir / "tensorboard").rglob("events.out.*")).parent))
    events.Reload()
    assert (
        "symptoms/dead_units" in events.Tags()["scalars"]
        and "symptoms/text_summary" in events.Tags()["tensors"]
    )
    lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("symptom dead_units in net.1")
    ]
    assert len(lines) == 1 and "try:" in lines[0], lines


@pytest.mark.slow
def test_fail_turns_a_symptom_into_SYMPTOM_and_exit_5(run_train, tmp_path):
    result = run_train(
        *QUICK,
        "model._target_=tests.sick_models.NegativeBiasReLU",
        "mode.max_steps=30",
        "mode.target_loss=0.5",
        "probes.symptoms.fail=true",
    )
    assert result.returncode == 5, result.stderr[-2000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "SYMPTOM" and verdict["judged"] == "PASS", verdict
    assert f"SYMPTOM: {', '.join(sorted(names(verdict)))} (probes.symptoms.fail=true" in result.stdout


def test_judge_leaves_failures_and_runs_without_symptoms_alone():
    for status, symptoms, fail, after in [
        ("PASS", [{"name": "loss_spike"}], True, "SYMPTOM"),
        ("DONE", [{"name": "loss_spike"}], True, "SYMPTOM"),
        ("PASS", [{"name": "loss_spike"}], False, "PASS"),
        ("PASS", [], True, "PASS"),
        ("FAIL", [{"name": "loss_spike"}], True, "FAIL"),
        ("NONFINITE", [{"name": "nonfinite"}], True, "NONFINITE"),
    ]:
        verdict = Verdict(status=status, items={"symptoms": symptoms})
        judge(verdict, fail)
        assert verdict.status == after, (status, symptoms, fail)
    assert exit_code({"status": "SYMPTOM"}) == 5


def test_a_symptom_is_one_of_the_names_and_gets_its_suggestion():
    symptom = Symptom("dead_units", 3, "net.1", 0.99999, "all zero")
    assert symptom.as_dict() == {
        "name": "dead_units",
        "step": 3,
        "where": "net.1",
        "value": 1.0,
        "detail": "all zero",
        "suggestion": SUGGESTIONS["dead_units"],
    }
    with pytest.raises(ValueError, match="unknown symptom 'dying'"):
        Symptom("dying", 0, "x", None, "")


def test_blocks_are_the_most_numerous_numbered_container():
    names = [
        "emb.weight",
        "enc.layers.0.w",
        "enc.layers.1.w",
        "dec.h.0.a",
        "dec.h.0.b",
        "dec.h.1.a",
        "dec.h.2.a",
    ]
    assert blocks_of(names) == [
        ("dec.h.0", ["dec.h.0.a", "dec.h.0.b"]),
        ("dec.h.1", ["dec.h.1.a"]),
        ("dec.h.2", ["dec.h.2.a"]),
    ]
    assert blocks_of(["net.0.weight", "net.2.weight", "head.weight"]) == [
        ("net.0", ["net.0.weight"]),
        ("net.2", ["net.2.weight"]),
    ]
    assert blocks_of(["rnn.weight_ih_l0", "head.weight"]) == [] and blocks_of(["layers.0.w"]) == []


def test_activation_kinds_are_read_from_class_names_third_party_included():
    from transformers.activations import ACT2CLS

    assert [kind_of(m) for m in (nn.ReLU(), nn.GELU(), nn.SiLU(), nn.LeakyReLU())] == ["relu"] * 4
    assert [kind_of(m) for m in (nn.Tanh(), nn.Hardtanh(), nn.Sigmoid(), nn.Hardsigmoid())] == [
        "tanh",
        "tanh",
        "sigmoid",
        "sigmoid",
    ]
    assert [kind_of(m) for m in (nn.Linear(2, 2), nn.LogSigmoid(), nn.Tanhshrink(), nn.Softmax())] == [
        None
    ] * 4

    class ReluMLP(nn.Sequential):  # a block named after its activation holds layers: not an activation
        pass

    assert kind_of(ReluMLP(nn.Linear(2, 2), nn.ReLU())) is None
    gelu, relu = ACT2CLS["gelu_new"], ACT2CLS["relu"]
    gelu = gelu[0] if isinstance(gelu, tuple) else gelu
    assert kind_of(gelu()) == "relu" and kind_of(relu[0]() if isinstance(relu, tuple) else relu()) == "relu"


# the activations probe


def test_activations_are_logged_on_their_steps_only_for_the_modules_picked(tmp_path_factory, data_root):
    run_dir, verdict = _run(
        tmp_path_factory,
        data_root,
        "acts",
        "model._target_=tests.sick_models.SaturatedTanh",
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
    from tests.sick_models import Layer, Stack

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


# zero false alarms: every built-in model and data source, overfit and mode=full; the vanishing preset


def _quiet(tmp_path_factory, data_root, name: str, *overrides: str) -> dict:
    run_dir = tmp_path_factory.mktemp(name)
    verdict = run(compose_config(["probes.plots=false", *overrides], run_dir, data_root))
    assert verdict["status"] in ("PASS", "DONE"), (overrides, verdict["status"], verdict.get("error"))
    assert verdict["symptoms"] == [], (overrides, verdict["symptoms"])
    return verdict


@pytest.mark.slow  # ~90 s: 18 overfit runs
@pytest.mark.parametrize(
    "model",
    ["model=transformer", "model=rnn", "model=lstm", "model=gpt", "model=hf", "model=hf model.arch=gpt2"],
)
def test_the_built_in_models_overfit_the_ladder_without_a_symptom(tmp_path_factory, data_root, model):
    for n in (1, 2, 5):
        _quiet(tmp_path_factory, data_root, "quiet", *model.split(), f"n={n}")


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=rnn", "data=text", "n=5"],
        ["model=hf", "model.arch=gpt2", "+model.config.activation_function=relu", "data=text", "n=5"],
        ["model=rnn", "mode=full", "mode.max_steps=300"],
    ],
    ids=["tanh-rnn-memorizing", "hf-gpt2-relu", "tanh-rnn-full"],
)
def test_healthy_runs_stay_under_the_activation_thresholds(overrides, tmp_path_factory, data_root):
    """The healthy runs closest to the thresholds: a tanh RNN memorizing text saturates up to 0.48 of its outputs,
    one in mode=full learns its way to 0.6-0.73 (from 0.1% at init: judged against saturated_late); a ReLU MLP
    zeroes up to 0.78 of its outputs and 0.10 of its units. Read every 5 steps: no symptom."""
    extra = [] if "mode=full" in overrides else ["mode.max_steps=200", "mode.target_loss=0"]
    run_dir, verdict = _run(
        tmp_path_factory, data_root, "healthy", *overrides, *extra, "probes.activations.every=5"
    )
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    read = [float(r[k]) for r in rows for k in r if k.endswith(("/saturated", "/zero_frac")) and r[k]]
    assert read and max(read) > 0.45, "the activations the thresholds judge were read, and came near them"
    assert not names(verdict) & {"dead_units", "saturated_activations"}, verdict["symptoms"]


@pytest.fixture(scope="module")
def folder(data_root, tmp_path_factory) -> Path:
    """A dataset folder in the harness's own format: a generated synthetic dataset, copied."""
    import shutil

    from harness.data import SyntheticDataModule

    made = SyntheticDataModule(root=str(tmp_path_factory.mktemp("made")), length=32)
    made.prepare_data()
    source = next(p.parent for p in Path(made.root).rglob("meta.json"))
    return Path(shutil.copytree(source, tmp_path_factory.mktemp("folder") / "data"))


CORPUS = ["data=corpus", "data.max_files=40", "tokenizer.vocab_size=512", "model.size=tiny"]


@pytest.mark.slow  # ~12 min: mode=full as it is, 2000 steps each
@pytest.mark.parametrize(
    "source",
    [
        "model=transformer",
        "model=rnn",
        "model=lstm",
        "model=gpt",
        "data=text",
        "data=folder",
        " ".join(CORPUS),
    ],
)
def test_mode_full_on_every_data_source_shows_no_symptom(tmp_path_factory, data_root, folder, source):
    extra = [f"data.path={folder}"] if source == "data=folder" else []
    _quiet(tmp_path_factory, data_root, "full", "mode=full", *source.split(), *extra)


@pytest.mark.slow  # ~20 s: the other data sources' overfit
@pytest.mark.parametrize("source", ["data=text", "data=folder", " ".join(CORPUS)])
def test_overfit_on_every_data_source_shows_no_symptom(tmp_path_factory, data_root, folder, source):
    extra = [f"data.path={folder}"] if source == "data=folder" else []
    _quiet(tmp_path_factory, data_root, "overfit", *source.split(), *extra)


@pytest.mark.slow  # ~2 min: three of the vanishing-gradients preset's longest jobs
def test_the_vanishing_preset_shows_its_science_and_nothing_else(tmp_path_factory, data_root):
    preset = ["mode=full", "mode.max_steps=300", "data.length=200", "data.rule=first_token"]
    for model in ("transformer", "lstm"):
        _quiet(tmp_path_factory, data_root, "preset", *preset, f"model={model}")
    run_dir = tmp_path_factory.mktemp("preset_rnn")
    verdict = run(compose_config(["probes.plots=false", *preset, "model=rnn"], run_dir, data_root))
    assert [(s["name"], s["where"]) for s in verdict["symptoms"]] == [
        ("vanishing_gradients", "input positions (grad_by_position)")
    ], verdict["symptoms"]
