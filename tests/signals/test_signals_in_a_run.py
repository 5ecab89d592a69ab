"""Signals land within a bounded time in a real train.py run, in each phase (start-up, data generation, the
preflight, a training step, plotting, validation), and a run stopped in validation resumes as if never stopped."""

from __future__ import annotations

import signal
import time

import pytest
import torch

from harness.report.verdict import read_verdict
from tests.conftest import metrics_but_the_clock
from tests.signals.conftest import BOUND_S, QUICK, ended, signal_and_check, start, wait_for

# --- a run, signalled in each phase (real train.py) -----------------------------------------------------------


@pytest.mark.slow  # generates ~100M tokens until signalled: ~15 s
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_data_generation(signum, tmp_path):
    run = tmp_path / "run"
    process = start(
        f"data.root={tmp_path / 'data'}",
        "data.length=100000",
        f"hydra.run.dir={run}",
        *QUICK,
        cwd=tmp_path,
    )
    wait_for(lambda: "generating 1100 examples" in (tmp_path / "out.txt").read_text(), process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, (signum,), "data generation")
    assert read_verdict(run)["steps"] == 0 and seconds < BOUND_S
    assert not list((tmp_path / "data").glob("synthetic/*-L100000-*")), "no half-written dataset in place"


@pytest.mark.slow  # a preflight check of 60 s signalled once, then one signalled twice: ~20 s
@pytest.mark.parametrize("signums", [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)])
def test_signal_during_the_preflight(signums, tmp_path, data_root):
    marker, run = tmp_path / "in_check", tmp_path / "run"
    checks = tmp_path / "preflight_slow.py"
    checks.write_text(
        "import pathlib, time\n\n\ndef test_slow_check():\n"
        f"    pathlib.Path({str(marker)!r}).write_text('x')\n    time.sleep(60)\n\n\n"
        f"def test_after():\n    pathlib.Path({str(tmp_path / 'after')!r}).write_text('x')\n"
    )
    process = start(
        f"data.root={data_root}", "n=1", f"+preflight_tests=[{checks}]", f"hydra.run.dir={run}", cwd=tmp_path
    )
    wait_for(marker.exists, process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, signums, "the preflight")
    assert seconds < BOUND_S and not (tmp_path / "after").exists(), "the checks after it should not run"
    assert read_verdict(run)["steps"] == 0


@pytest.mark.slow  # a 60 s training step: the first signal waits for it, the second does not: ~15 s
def test_second_signal_during_a_training_step_stops_at_once(tmp_path, data_root):
    marker, run = tmp_path / "in_step", tmp_path / "run"
    process = start(
        f"data.root={data_root}",
        "model=rnn",
        "model._target_=tests.forks.models.SlowGRU",
        "mode=full",
        "mode.max_steps=100",
        f"hydra.run.dir={run}",
        *QUICK,
        cwd=tmp_path,
        marker=marker,
    )
    wait_for(marker.exists, process, tmp_path)
    process.send_signal(signal.SIGTERM)
    time.sleep(3)
    assert process.poll() is None, "the first signal waits for the step to end"
    assert "stopping after this step" in (tmp_path / "out.txt").read_text()
    seconds = signal_and_check(process, tmp_path, run, (signal.SIGTERM,), "training")
    assert seconds < BOUND_S and read_verdict(run)["steps"] == 2


@pytest.mark.slow  # an on_train_end of 60 s (as plots can take), signalled: ~12 s
def test_signal_while_plotting_after_training(tmp_path, data_root):
    marker, run = tmp_path / "in_plots", tmp_path / "run"
    process = start(
        f"data.root={data_root}",
        "n=1",
        "mode.max_steps=3",
        "+callbacks.slow_end._target_=tests.forks.models.SlowEnd",
        f"hydra.run.dir={run}",
        *QUICK,
        cwd=tmp_path,
        marker=marker,
    )
    wait_for(marker.exists, process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, (signal.SIGINT,), "the end of training")
    assert seconds < BOUND_S


@pytest.mark.slow  # three train.py start-ups signalled part-way: ~10 s
@pytest.mark.parametrize(
    ("delay", "signum"), [(1.0, signal.SIGINT), (2.5, signal.SIGINT), (2.0, signal.SIGTERM)]
)
def test_signal_during_start_up_ends_the_run(delay, signum, tmp_path, data_root):
    """While Python imports torch and Hydra composes: never a run that goes on."""
    run = tmp_path / "run"
    process = start(f"data.root={data_root}", "n=1", f"hydra.run.dir={run}", *QUICK, cwd=tmp_path)
    time.sleep(delay)
    sent = time.monotonic()
    process.send_signal(signum)
    ended(process, tmp_path, sent)
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode == 128 + signum, out[-3000:]
    assert not (run / "metrics.csv").exists(), "training should not have started"
    if (run / "verdict.json").exists():  # the job had begun: it says why it stopped
        assert read_verdict(run)["status"] == "INTERRUPTED"


@pytest.mark.slow  # a run whose validation batches take 2 s each, signalled in one; resumed to its end: ~40 s
def test_signal_during_validation_stops_at_its_next_batch_and_resumes_as_if_never_stopped(
    tmp_path, data_root, make_config, one_thread
):
    """It ran the whole validation pass first (12 s later, still running). Now it stops at the next batch with the
    step's checkpoint, and the resumed run runs that validation again: its metrics.csv is the uninterrupted
    run's, row for row (one thread here, as in the signalled process: the same sums in the same order)."""
    from harness.tasks.training import run as train

    marker, run = tmp_path / "in_validation", tmp_path / "run"
    args = [
        "mode=full", "mode.max_steps=8", "mode.val_every=4", "mode.ckpt_every=4", "mode.log_every=1",
        "data.size=64", "data.batch_size=8", "data.val_size=40", *QUICK,
    ]  # fmt: skip
    process = start(
        f"data.root={data_root}", *args, "+callbacks.slow._target_=tests.forks.models.SlowValidation",
        f"hydra.run.dir={run}", cwd=tmp_path, marker=marker,
    )  # fmt: skip
    wait_for(marker.exists, process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, (signal.SIGTERM,), "validation")
    assert seconds < BOUND_S and read_verdict(run)["steps"] == 4
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    resumed = train(make_config(*args, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", run_dir=run))
    straight = train(make_config(*args, run_dir=tmp_path / "straight"))
    assert metrics_but_the_clock(run) == metrics_but_the_clock(tmp_path / "straight")
    for key in ("status", "steps", "final_loss", "val_loss", "accuracy", "p_correct"):
        assert resumed[key] == straight[key], (key, resumed, straight)
