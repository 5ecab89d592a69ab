"""mode=eval: a checkpoint measured with the config it was trained with; eval.json read back."""

from __future__ import annotations

import json
import math
import shutil
import sys

import pytest
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.tasks.job import perform
from harness.tasks.training import run
from tests.conftest import PROBES_OFF, ROOT, run_command

CORPUS = "\n".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(400))


@pytest.fixture
def trained(make_config, tmp_path):
    """A short mode=full run of a tiny GPT on a small corpus with a BPE: its run dir and verdict."""
    (tmp_path / "corpus.py").write_text(CORPUS)
    run_dir = tmp_path / "outputs" / "runs" / "day" / "first"
    cfg = make_config(
        "mode=full",
        "data=corpus",
        f"data.files={tmp_path / 'corpus.py'}",
        f"data.root={tmp_path / 'data'}",
        "data.length=16",
        "data.workers=1",
        "tokenizer.vocab_size=300",
        "model.d_model=32",
        "model.layers=1",
        "model.heads=2",
        "mode.max_steps=8",
        "mode.val_every=8",
        "preflight=false",
        *PROBES_OFF,
        run_dir=run_dir,
    )
    verdict = run(cfg)
    assert verdict["status"] == "DONE"
    # what Hydra writes beside every run (this config was composed in-process, so written here as Hydra would)
    (run_dir / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, run_dir / ".hydra" / "config.yaml")
    return run_dir, verdict


def test_eval_py_reads_the_checkpoint_through_the_door(trained, tmp_path):
    """The command a user types: the door checks mode=eval's keys (no optimizer, no Trainer to try) and passes."""
    run_dir, _ = trained
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    evaluated = run_command(
        sys.executable,
        str(ROOT / "eval.py"),
        f"ckpt_path={checkpoint}",
        "mode.samples=1",
        "mode.new_tokens=2",
        f"hydra.run.dir={tmp_path / 'eval'}",
        cwd=tmp_path,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())["checkpoint"] == str(checkpoint)


def test_eval_measures_the_checkpoint_with_its_own_config(trained, make_config, tmp_path):
    run_dir, trained_verdict = trained
    eval_dir = run_dir.parent / "second"
    # nothing about the model or the data given: they come from the checkpoint's run dir
    verdict = perform(
        make_config(
            "mode=eval",
            "ckpt_path=last",
            f"paths.log_dir={tmp_path / 'outputs'}",  # where ckpt_path=last looks: its runs/
            "mode.samples=2",
            "mode.new_tokens=5",
            run_dir=eval_dir,
        )
    )
    report = json.loads((eval_dir / "eval.json").read_text())
    assert verdict["status"] == "DONE" and verdict["mode"] == "eval" and verdict["model"] == "GPT"
    assert report["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    # the same weights on the same validation windows: the training run's own val/loss
    assert report["loss"] == pytest.approx(trained_verdict["val_loss"], rel=1e-5)
    assert report["perplexity"] == pytest.approx(math.exp(report["loss"]))
    assert report["bits_per_token"] == pytest.approx(report["loss"] / math.log(2))
    assert 0 < report["bits_per_byte"] < report["bits_per_token"]  # a BPE token holds more than a byte
    assert report["tokens"] > 0 and report["tokens"] % 16 == 0
    assert 0 < report["unigram_entropy"] < math.log(300)
    assert len(report["continuations"]) == 2
    for sample in report["continuations"]:
        assert sample["prompt"] and CORPUS.find(sample["prompt"]) >= 0, sample
        assert isinstance(sample["greedy"], str) and isinstance(sample["sampled"], str)


def test_eval_refuses_a_checkpoint_of_another_model(trained, make_config, tmp_path):
    run_dir, _ = trained
    moved = tmp_path / "moved.ckpt"  # away from its run dir: the config given is all there is
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", moved)
    cfg = make_config(
        "mode=eval",
        f"ckpt_path={moved}",
        "data=corpus",
        f"data.files={tmp_path / 'corpus.py'}",
        f"data.root={tmp_path / 'data'}",
        "data.length=16",
        "tokenizer.vocab_size=300",
        "model=rnn",
        run_dir=tmp_path / "eval",
    )
    with pytest.raises(ConfigError) as err:
        perform(cfg)
    assert str(err.value).startswith(f"ckpt_path={moved}") and "another model shape" in str(err.value), (
        err.value
    )


def test_eval_needs_a_checkpoint(make_config):
    with pytest.raises(ConfigError) as err:
        perform(make_config("mode=eval"))
    assert str(err.value).startswith("ckpt_path=None") and "mode=eval" in str(err.value), err.value


def test_the_lm_preset_trains_then_evaluates(make_config, tmp_path):
    """experiment=lm, shrunk to seconds: a slice of stdlib, a small BPE, a tiny GPT, a few steps; then
    mode=eval ckpt_path=last on what it wrote."""
    shrink = (
        "data.max_bytes=40000",
        f"data.root={tmp_path / 'data'}",
        "data.length=16",
        "data.val_windows=8",
        "tokenizer.vocab_size=300",
        "model.size=tiny",
        "model.layers=1",
        "mode.max_steps=4",
        "mode.val_every=4",
        "schedule.warmup_steps=2",
        "preflight=false",
    )
    runs = tmp_path / "outputs" / "runs" / "day"
    cfg = make_config("experiment=lm", *shrink, *PROBES_OFF, run_dir=runs / "lm")
    assert (cfg.model.size, cfg.data.files, cfg.tokenizer.kind, cfg.schedule.shape) == (
        "tiny",
        "stdlib",
        "bpe",
        "cosine",
    )
    trained = run(cfg)
    assert trained["status"] == "DONE" and trained["model"] == "GPT" and trained["steps"] == 4
    (runs / "lm" / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, runs / "lm" / ".hydra" / "config.yaml")
    perform(
        make_config(
            "mode=eval", "ckpt_path=last", f"paths.log_dir={tmp_path / 'outputs'}", run_dir=runs / "eval"
        )
    )
    report = json.loads((runs / "eval" / "eval.json").read_text())
    assert report["loss"] == pytest.approx(trained["val_loss"], rel=1e-5) and report["tokens"] == 8 * 16


def test_ckpt_path_last_looks_only_under_the_log_dir_and_says_where(make_config, tmp_path):
    """With paths.log_dir an empty folder and the run dir elsewhere, an unrelated run's last.ckpt two folders up
    from the run dir was taken. `last` looks in one place, paths.log_dir/runs, and says so when it is empty."""
    unrelated = tmp_path / "elsewhere" / "old" / "run" / "checkpoints" / "last.ckpt"  # as runs/<date>/<time>
    unrelated.parent.mkdir(parents=True)
    unrelated.write_bytes(b"not this one")
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = make_config(
        "mode=eval", "ckpt_path=last", f"paths.log_dir={empty}", run_dir=tmp_path / "elsewhere" / "y" / "run"
    )
    with pytest.raises(ConfigError) as err:
        perform(cfg)
    message = str(err.value)
    assert message.startswith(f"ckpt_path=last: no run under {empty / 'runs'} (paths.log_dir/runs/"), message
    assert "\n" not in message


@pytest.mark.parametrize("damage", ["mode: {name: [eval", "[1, 2]\n", "\xff\xfe not text"])
def test_eval_beside_a_damaged_run_config_is_one_line(damage, trained, make_config, tmp_path):
    run_dir, _ = trained
    (run_dir / ".hydra" / "config.yaml").write_bytes(damage.encode("latin-1"))
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError) as err:
        perform(make_config("mode=eval", f"ckpt_path={ckpt}", run_dir=tmp_path / "eval"))
    message = str(err.value)
    assert message.startswith(
        f"ckpt_path={ckpt}: the config of the run that saved it, {run_dir}/.hydra/config.yaml"
    )
    assert "cannot be read" in message and "\n" not in message
