"""Resume: bit for bit from a checkpoint, from one a signal saved, and after a hard kill the uninterrupted run's
verdict and metrics; a finished run's last checkpoint gives its verdict; a checkpoint of another optimizer or
schedule is refused in one line."""

from __future__ import annotations

import signal

import pytest
import torch

from harness.errors import ConfigError
from harness.report.verdict import read_verdict
from harness.tasks.training import run
from tests.conftest import PROBES_OFF, metrics_but_the_clock, start_train, wait_for_steps
from tests.train.conftest import FORK, FULL, _rows, _weights


def test_resume_is_bit_for_bit(make_config, tmp_path):
    """24 steps, then resumed to 48 (mid-epoch, dropout on) == one run of 48: weights and losses."""
    run(make_config(*FULL, "mode.max_steps=24", run_dir=tmp_path / "first"))
    run(
        make_config(
            *FULL,
            "mode.max_steps=48",
            f"ckpt_path={tmp_path / 'first/checkpoints/last.ckpt'}",
            run_dir=tmp_path / "resumed",
        )
    )
    run(make_config(*FULL, "mode.max_steps=48", run_dir=tmp_path / "straight"))
    resumed, straight = (
        _weights(tmp_path / "resumed/checkpoints/last.ckpt"),
        _weights(tmp_path / "straight/checkpoints/last.ckpt"),
    )
    gaps = {k: (resumed[k] - straight[k]).abs().max().item() for k in straight}
    assert all(torch.equal(resumed[k], straight[k]) for k in straight), max(
        gaps.items(), key=lambda kv: kv[1]
    )
    losses = {r["step"]: r["train/loss"] for r in _rows(tmp_path / "straight/metrics.csv")}
    after = _rows(tmp_path / "resumed/metrics.csv")
    assert after and all(losses[r["step"]] == r["train/loss"] for r in after)


@pytest.mark.slow  # a train.py run signalled mid-way, then resumed: ~10 s each (the preflight's signal test stays)
@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
)
def test_signal_saves_a_checkpoint_that_resumes_bit_for_bit(signum, code, tmp_path, data_root, make_config):
    """The real process is signalled mid-run; resuming from its checkpoint (in-process, quicker) ends at the
    same weights, bit for bit, as one uninterrupted run."""
    args = [
        f"data.root={data_root}",
        *FULL,
        "mode.max_steps=100000",
        "mode.log_every=1",
    ]  # stopped long before
    first = start_train(*args, run_dir=tmp_path / "first", cwd=tmp_path)
    wait_for_steps(tmp_path / "first/metrics.csv", 10, first)
    first.send_signal(signum)
    out, err = first.communicate(timeout=60)
    assert first.returncode == code, (out + err)[-3000:]
    verdict = read_verdict(tmp_path / "first")
    assert verdict["status"] == "INTERRUPTED" and 10 <= verdict["steps"] < 100000
    ckpt = tmp_path / "first/checkpoints/last.ckpt"
    assert torch.load(ckpt, weights_only=True)["global_step"] == verdict["steps"]
    steps = verdict["steps"] + 7
    for name, extra in (("resumed", [f"ckpt_path={ckpt}"]), ("straight", [])):
        run(make_config(*FULL, f"mode.max_steps={steps}", *extra, run_dir=tmp_path / name))
    resumed, straight = (
        _weights(tmp_path / "resumed/checkpoints/last.ckpt"),
        _weights(tmp_path / "straight/checkpoints/last.ckpt"),
    )
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


# --- resume after a hard kill: the uninterrupted run's verdict and metrics ------------------------------------------

KILLED = [
    "mode=full", "mode.max_steps=24", "mode.val_every=8", "mode.ckpt_every=8", "mode.log_every=1",
    "data.size=56", "data.batch_size=8", "model.dropout=0.1", "preflight=false", "mode.progress_bar=false",
]  # fmt: skip
JUDGED = ("status", "steps", "final_loss", "val_loss", "accuracy", "p_correct", "reach_init", "reach_final")


@pytest.mark.slow  # per case a train.py run killed with SIGKILL, resumed, and the uninterrupted run: ~25 s
@pytest.mark.parametrize(
    ("step", "hook"),
    [
        (24, "on_validation_start"),  # right after the final checkpoint, before the final validation
        (16, "on_validation_start"),  # right after a periodic checkpoint, before its validation
        (11, "on_train_batch_start"),  # mid-training, three steps after the step-8 checkpoint
    ],
    ids=["after_the_final_checkpoint", "after_a_checkpoint_before_its_validation", "mid_training"],
)
def test_resume_after_a_hard_kill_gives_the_uninterrupted_run(
    step, hook, tmp_path, data_root, make_config, monkeypatch, one_thread
):
    """kill -9 at three points, then ckpt_path to the last checkpoint in the same dir: the verdict and every row
    of metrics.csv (train/loss, lr, val/loss, the probes') are the uninterrupted run's. After the final checkpoint
    it ended with final_loss and val_loss null; mid-training, with the rows of the redone steps twice."""
    monkeypatch.setenv("PYTHONPATH", FORK["PYTHONPATH"])  # the killer callback lives in tests/
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the runs in this process (one_thread): the same sums
    killed = start_train(
        f"data.root={data_root}", *KILLED, "+callbacks.kill._target_=tests.forks.models.KillAt",
        f"+callbacks.kill.step={step}", f"+callbacks.kill.hook={hook}", run_dir=tmp_path / "run", cwd=tmp_path,
    )  # fmt: skip
    killed.communicate(timeout=240)
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "run" / "verdict.json").exists()
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    resumed = run(make_config(*KILLED, f"ckpt_path={ckpt}", run_dir=tmp_path / "run"))
    straight = run(make_config(*KILLED, run_dir=tmp_path / "straight"))
    assert {k: resumed.get(k) for k in JUDGED} == {k: straight.get(k) for k in JUDGED}
    assert resumed["final_loss"] is not None and resumed["val_loss"] is not None
    assert metrics_but_the_clock(tmp_path / "run") == metrics_but_the_clock(tmp_path / "straight")


def test_resuming_a_finished_runs_last_checkpoint_gives_its_verdict(make_config, tmp_path, one_thread):
    """Resumed at its last step (before its final validation), Lightning does nothing at all: the verdict came
    out with final_loss and val_loss null. The checkpoint's kept loss and the owed validation give them back."""
    args = (*FULL, "mode.max_steps=12", "mode.log_every=1")
    finished = run(make_config(*args, run_dir=tmp_path / "first"))
    again = run(
        make_config(
            *args, f"ckpt_path={tmp_path / 'first/checkpoints/last.ckpt'}", run_dir=tmp_path / "again"
        )
    )
    for key in ("status", "steps", "final_loss", "val_loss", "accuracy", "p_correct"):
        assert again[key] == finished[key] and again[key] is not None, (key, again, finished)


#: a mode=full run of two steps that leaves checkpoints/last.ckpt, to resume with other settings
TWO_STEPS_CHECKPOINTED = (
    "mode=full",
    "mode.max_steps=2",
    "mode.val_every=2",
    "mode.ckpt_every=2",
    "preflight=false",
    *PROBES_OFF,
)


def test_a_checkpoint_of_another_optimizer_or_schedule_is_refused_in_one_line(make_config, tmp_path):
    """An AdamW checkpoint resumed with optim=sgd was a KeyError: 'momentum' inside Lightning's first step."""
    base = TWO_STEPS_CHECKPOINTED
    run(make_config(*base, run_dir=tmp_path / "adamw"))
    ckpt = f"ckpt_path={tmp_path / 'adamw/checkpoints/last.ckpt'}"
    with pytest.raises(ConfigError) as err:
        run(make_config(*base, "mode.max_steps=4", "optim=sgd", ckpt, run_dir=tmp_path / "sgd"))
    message = str(err.value)
    assert message.startswith(f"{ckpt}: was saved with another optimizer") and "SGD needs" in message, message
    assert "momentum" in message and "\n" not in message and not (tmp_path / "sgd" / "metrics.csv").exists()
    with pytest.raises(ConfigError, match="another learning-rate schedule"):
        run(make_config(*base, "mode.max_steps=4", "~schedule", ckpt, run_dir=tmp_path / "none"))
    # the same optimizer and schedule with other values resumes: its values are the config's from then on
    other = run(
        make_config(
            *base, "mode.max_steps=4", "optim.lr=1e-3", "schedule=linear", ckpt, run_dir=tmp_path / "b"
        )
    )
    assert other["status"] == "DONE" and other["steps"] == 4


@pytest.mark.slow  # a train.py run: ~10 s
def test_another_optimizers_checkpoint_through_train_py_is_one_line(run_train, make_config, tmp_path):
    base = TWO_STEPS_CHECKPOINTED
    run(make_config(*base, run_dir=tmp_path / "adamw"))
    result = run_train(
        *base, "mode.max_steps=4", "optim=sgd", f"ckpt_path={tmp_path}/adamw/checkpoints/last.ckpt"
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "another optimizer" in lines[0], result.stderr[
        -3000:
    ]
    assert "Traceback" not in result.stdout + result.stderr
