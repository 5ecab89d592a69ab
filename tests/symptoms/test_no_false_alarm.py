"""(mostly slow) Zero false alarms: every built-in model and data source, overfit and mode=full, shows no
symptom; the vanishing-gradients preset shows its science and nothing else."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from harness.tasks.training import run
from tests.conftest import compose_config, needs_probes
from tests.symptoms.conftest import _run, names

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_probes]


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
