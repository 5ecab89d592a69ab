"""Where the symptoms go: the verdict, the console and every logger; `fail` turns one into SYMPTOM and exit 5;
judge() and the names and suggestions of symptoms; the blocks and activation kinds the detectors read."""

from __future__ import annotations

import csv
import json
import re

import pytest
from omegaconf import OmegaConf
from torch import nn

from harness.report.symptoms import SUGGESTIONS, Symptom, judge
from harness.report.verdict import Verdict, exit_code
from tests.conftest import compose_config, needs_probes

pytest.importorskip("harness.probes", reason="this project has no probes")  # a fork may delete them
from harness.probes.detectors import blocks_of  # noqa: E402
from harness.probes.layers.activations import kind_of  # noqa: E402
from tests.symptoms.conftest import QUICK, _run, names

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]


# where the symptoms go: verdict, console, every logger; SYMPTOM and exit 5


def test_symptoms_reach_every_logger_and_the_console(tmp_path_factory, data_root, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, verdict = _run(
        tmp_path_factory,
        data_root,
        "loggers",
        "model._target_=tests.forks.sick_models.NegativeBiasReLU",
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
        "model._target_=tests.forks.sick_models.NegativeBiasReLU",
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


MISSING_KEY = object()
#: the top-level keys a fix may name (a key under any other word is a library's, e.g. torch._dynamo.config)
FIXED_GROUPS = ("data", "model", "optim", "schedule", "trainer", "probes", "mode", "perf", "debug")


def named_keys(text: str) -> tuple[list[str], list[str]]:
    """(the config keys `text` names, its `group=option` choices)."""
    groups = "|".join(FIXED_GROUPS)
    keys = re.findall(rf"\b((?:{groups})(?:\.[a-z_]+)+)", text)
    choices = re.findall(rf"(?<![.\w])((?:{groups})=[a-z_]+)\b", text)
    return keys, choices


def test_every_key_a_fix_names_is_a_key_of_the_config(tmp_path):
    """A fix that names a key the config does not have (`schedule.warmup` for `schedule.warmup_steps`) sends the
    user to an error; each key is composed with the choices its fix gives (`schedule=cosine`)."""
    assert named_keys("add warmup (schedule=cosine schedule.warmup=...)") == (
        ["schedule.warmup"],
        ["schedule=cosine"],
    )
    for name, fix in SUGGESTIONS.items():
        keys, choices = named_keys(fix)
        cfg = compose_config(choices, tmp_path / name, tmp_path / "data")
        for key in keys:
            assert OmegaConf.select(cfg, key, default=MISSING_KEY) is not MISSING_KEY, (name, key, choices)
