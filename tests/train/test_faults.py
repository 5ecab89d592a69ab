"""Faults and bad input: nothing is lost, nothing hangs, nothing surprises: a nonfinite loss stops at its step,
a hard kill keeps the metrics logged until then, no network and no stdin are needed, a checkpoint of another
shape and bad input are refused in one line, a corrupt data folder is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from harness.errors import ConfigError
from harness.report.verdict import exit_code, read_verdict
from harness.tasks.training import run
from tests.conftest import PROBES_OFF, ROOT, metrics_but_the_clock, start_train, wait_for_steps
from tests.train.conftest import FORK, FULL, _rows, _weights


def test_same_config_twice_gives_identical_metrics(make_config, tmp_path):
    for name in ("a", "b"):
        run(make_config("n=2", "model.dropout=0.2", "preflight=false", run_dir=tmp_path / name))
    same = metrics_but_the_clock(tmp_path / "a")
    assert same == metrics_but_the_clock(tmp_path / "b")
    assert len(same) > 10 and any(k.startswith("train/") for row in same for k in row if row[k]), same[:3]


@pytest.mark.slow  # two mode=full runs: ~10 s
def test_the_preflight_leaves_training_as_if_it_never_ran(make_config, tmp_path):
    """The checks draw from and re-seed every global generator (the preflight's, and those run as training
    starts): a run with them trains as one without them, dropout and shuffling included, bit for bit (mode=full:
    overfit mode re-seeds at every step)."""
    settings = [s for s in FULL if not s.startswith("preflight=")] + ["mode.max_steps=14"]
    for preflight in ("warn", "false"):
        run(make_config(*settings, f"preflight={preflight}", run_dir=tmp_path / preflight))
    checked = metrics_but_the_clock(tmp_path / "warn")
    assert checked == metrics_but_the_clock(tmp_path / "false"), checked[:3]
    assert read_verdict(tmp_path / "warn")["checks"], "the preflight ran"


@pytest.mark.parametrize("fused", [True, False], ids=["on-the-device", "on-the-host"])
def test_nonfinite_names_its_step_and_module_and_skips_its_update(fused, make_config, tmp_path):
    """In-process (test_nonfinite_ends_an_overfit_run_with_its_verdict runs train.py itself, in test-slow). The
    fused optimizer skips the bad step's update on the device, and the flag is read at the next logging step
    (mode=full: every 10); any other reads it on the host before its step, and stops there."""
    verdict = run(
        make_config(
            "model=rnn",
            "model._target_=tests.forks.models.ExplodingGRU",
            "mode=full",
            "mode.ckpt_every=2",
            "mode.max_steps=50",
            "preflight=false",
            "mode.progress_bar=false",
            f"optim.fused={str(fused).lower()}",
        )
    )
    assert exit_code(verdict) == 4, verdict
    assert verdict["status"] == "NONFINITE" and "blowup" in verdict["nonfinite"]["where"], verdict
    bad = verdict["nonfinite"]["step"]
    assert bad <= 5 and verdict["steps"] == (10 if fused else bad), verdict
    kept = _weights(tmp_path / "run/checkpoints/last.ckpt")  # saved every 2 steps, after the bad one too
    assert all(torch.isfinite(v).all() for v in kept.values())


@pytest.mark.slow  # a whole train.py run (the mode=full NaN test above runs in-process in make test)
def test_nonfinite_ends_an_overfit_run_with_its_verdict(run_train, tmp_path):
    result = run_train(
        "model=rnn",
        "model._target_=tests.forks.models.ExplodingGRU",
        "preflight=false",
        *PROBES_OFF,
        env=FORK,
    )
    assert result.returncode == 4, result.stderr[-3000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "NONFINITE" and verdict["mode"] == "overfit", verdict


@pytest.mark.slow  # a train.py run killed mid-way: ~10 s
def test_hard_kill_leaves_the_metrics_logged_until_then(tmp_path, data_root):
    args = [
        f"data.root={data_root}",
        *FULL,
        "mode.max_steps=5000",
        "mode.log_every=1",
    ]
    process = start_train(*args, run_dir=tmp_path / "run", cwd=tmp_path)
    wait_for_steps(tmp_path / "run/metrics.csv", 25, process)
    process.kill()
    process.wait(timeout=30)
    rows = _rows(tmp_path / "run/metrics.csv")
    assert len(rows) >= 25 and [int(r["step"]) for r in rows] == sorted(int(r["step"]) for r in rows)
    assert (tmp_path / "run/checkpoints/last.ckpt").exists()  # the periodic one, at step 12 or 24


@pytest.mark.slow  # ~10-15 s: a whole train.py run under its own conditions
def test_no_network_no_stdin(tmp_path, data_root):
    """The default run and a wandb run, stdin closed, in an empty network namespace where one exists
    (the whole process tree, wandb's service included, has no network), with every Python-level
    attempt at a network socket or a name lookup recorded and refused. Local (unix) sockets are allowed:
    wandb talks to its own service through one."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(
        "import socket\n"
        "connect, connect_ex = socket.socket.connect, socket.socket.connect_ex\n"
        "def record(what):\n"
        f"    open({str(tmp_path / 'attempts.txt')!r}, 'a').write(repr(what) + '\\n')\n"
        "    raise OSError('network refused by the test')\n"
        "def guarded(original):\n"
        "    def call(sock, address, *args):\n"
        "        return original(sock, address, *args) if sock.family == socket.AF_UNIX else record(address)\n"
        "    return call\n"
        "socket.socket.connect, socket.socket.connect_ex = guarded(connect), guarded(connect_ex)\n"
        "socket.getaddrinfo = lambda *args, **kwargs: record(args)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{guard}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    isolate = (
        ["unshare", "-n"]
        if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
        else []
    )
    for extra in ([], ["logger=wandb"]):
        result = subprocess.run(
            [
                *isolate,
                sys.executable,
                str(ROOT / "train.py"),
                f"data.root={data_root}",
                "n=1",
                *extra,
                f"hydra.run.dir={tmp_path}/run{len(extra)}",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=lambda: os.close(0),
        )
        assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "attempts.txt").exists(), (tmp_path / "attempts.txt").read_text()
    assert list((tmp_path / "run1/wandb").glob("offline-run-*")), "wandb wrote no offline run"


def test_checkpoint_of_another_shape_or_with_code_is_refused(make_config, tmp_path):
    run(
        make_config(
            "mode=full",
            "mode.max_steps=2",
            "mode.val_every=2",
            "mode.ckpt_every=2",
            "preflight=false",
            run_dir=tmp_path / "small",
        )
    )
    ckpt = tmp_path / "small/checkpoints/last.ckpt"
    with pytest.raises(ConfigError, match="another model shape"):
        run(
            make_config(
                "mode=full",
                "model.d_model=32",
                f"ckpt_path={ckpt}",
                "preflight=false",
                run_dir=tmp_path / "big",
            )
        )
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": ConfigError("x", 1, "runs code when unpickled")}, evil)
    with pytest.raises(ConfigError, match="not a readable Lightning checkpoint"):
        run(make_config("mode=full", f"ckpt_path={evil}", "preflight=false", run_dir=tmp_path / "evil"))


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("hydra.run.dir=/etc/hostname/run", "hydra.run.dir=/etc/hostname/run"),
        ("model.max_len=8", "data.length=32"),
        ("trainer=gpu", "trainer.accelerator=gpu"),
        ("ckpt_path=/nonexistent.ckpt", "ckpt_path=/nonexistent.ckpt"),
    ],
)
def test_more_bad_input_exits_2_with_one_line(override, names, run_train, tmp_path):
    if override == "trainer=gpu" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = run_train(override)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and names in lines[0], result.stderr


@pytest.mark.slow  # two train.py runs: ~9 s
def test_real_data_folder_trains_and_is_refused_when_corrupt(run_train, make_config, tmp_path):
    from harness.data.format import write_dataset
    from harness.data.sources.synthetic import generate

    records = generate(16, 12, "first_token", "abcdefgh", "xy", seed=1)
    folder = write_dataset(
        tmp_path / "mine",
        {"train": records[:10], "val": records[10:]},
        task="classify",
        alphabet="abcdefghxy",
        length=16,
        source={"made_by": "test"},
    )
    ok = run(
        make_config(
            "data=folder",
            f"data.path={folder}",
            "data.length=16",
            "n=2",
            *PROBES_OFF,
            run_dir=tmp_path / "ok",
        )
    )
    assert ok["status"] == "PASS", ok
    train = folder / "train.jsonl"
    truncated = train.read_text()[:-20]  # the last record cut mid-line
    train.write_text(truncated)
    bad = run_train("data=folder", f"data.path={folder}", "data.length=16", "n=2")
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "corrupt" in lines[0] and str(folder) in lines[0], (
        bad.stderr
    )
    assert train.read_text() == truncated, "the user's own data was rewritten"  # refused, never "repaired"


def test_signal_during_the_preflight_stops_before_training(make_config, tmp_path):
    checks = tmp_path / "preflight_interrupted.py"  # a check during which Ctrl-C arrives
    checks.write_text(
        "import os, signal\n\n\ndef test_slow_check():\n    os.kill(os.getpid(), signal.SIGINT)\n"
    )
    before = signal.getsignal(
        signal.SIGINT
    )  # Python's own; ignored where a shell started us in the background
    verdict = run(make_config("n=1", *PROBES_OFF, f"+preflight_tests=[{checks}]"))
    assert verdict["status"] == "INTERRUPTED" and verdict["signal"] == signal.SIGINT, verdict
    assert verdict["steps"] == 0 and exit_code(verdict) == 130
    assert read_verdict(tmp_path / "run")["status"] == "INTERRUPTED"
    assert signal.getsignal(signal.SIGINT) is before  # the handlers went back
