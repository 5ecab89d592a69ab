"""Symptoms found: a planted runtime bug for each one (tests/forks/sick_models.py), found with its name and
where, in layers and in activation functions called in a forward; and silence on a healthy run."""

from __future__ import annotations

import csv

import pytest

from tests.conftest import needs_probes
from tests.symptoms.conftest import _run, found

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]


# planted bugs: each symptom, with the right name and `where`


def test_a_deep_sigmoid_stack_has_vanishing_gradients_named_at_its_first_block(tmp_path_factory, data_root):
    _, verdict = _run(
        tmp_path_factory,
        data_root,
        "sigmoid",
        "model._target_=tests.forks.sick_models.DeepSigmoid",
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
        "model._target_=tests.forks.sick_models.NegativeBiasReLU",
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
        "model._target_=tests.forks.sick_models.NegativeBiasSiLU",
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
        "model._target_=tests.forks.sick_models.SaturatedTanh",
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
        (["model._target_=tests.forks.sick_models.FunctionalTanh", "+model.scale=100"], "net/tanh", 0.9),
        (["model._target_=tests.forks.sick_models.FunctionalTanh", "+model.scale=30"], "net/tanh", 0.6),
        (
            ["model=hf", "model._target_=tests.forks.sick_models.GPT2SaturatedTanh"],
            "lm.transformer.h.0.mlp/tanh",
            0.9,
        ),
        (["model=rnn", "model._target_=tests.forks.sick_models.saturated_rnn"], "recurrence", 0.6),
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
        (["model._target_=tests.forks.sick_models.FunctionalReLU"], "net/relu"),
        (["model._target_=tests.forks.sick_models.DeadReLUNet"], "forward/relu"),
        (["model=hf", "model._target_=tests.forks.sick_models.LlamaDeadReLU"], "lm.model.layers.0.mlp/relu"),
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
        "model._target_=tests.forks.sick_models.HugeInit",
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
        "model._target_=tests.forks.sick_models.RecurringSpike",
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
        tmp_path_factory, data_root, "nan", "model=rnn", "model._target_=tests.forks.models.ExplodingGRU"
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
