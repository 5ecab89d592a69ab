"""Signals stop whole sweeps of the local launchers (sequential, joblib, submitit) and Optuna's, the corpus
preparer and a run's tokenizing workers, with no process left behind."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.report.verdict import read_verdict
from harness.signals import loky_workers
from tests.conftest import ROOT
from tests.signals.conftest import BOUND_S, FORK, QUICK, ended, signal_and_check, start, steps, wait_for

# --- sweeps stop as a whole --------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is dead: it only waits for its parent to read its status)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> list[int]:
    """The live processes of process group `pgid`, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def command_of(pid: int) -> str:
    """The command line of process `pid`, as ps shows it."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(ended)"


def sweep_args(tmp_path: Path, data_root: Path, *extra: str) -> list[str]:
    """Three jobs: the first ends after 10 steps, the other two would train for hours."""
    return [
        "-m",
        *extra,
        f"data.root={data_root}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "mode=full",
        "mode.max_steps=10,100000,100001",
        "mode.val_every=1000",
        "mode.log_every=1",
        "data.length=8",
        "data.size=64",
        "data.batch_size=8",
        *QUICK,
    ]


def check_stopped_sweep(process, tmp_path: Path, signum: int, running: list[str]) -> dict:
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode == 128 + signum, out[-3000:]
    sweep = tmp_path / "sweep"
    verdicts = {d.name: read_verdict(d) for d in sweep.iterdir() if (d / "verdict.json").is_file()}
    assert verdicts["0"]["status"] == "DONE", verdicts
    for job in running:
        assert verdicts[job]["status"] == "INTERRUPTED" and verdicts[job]["steps"] > 0, verdicts[job]
    assert all(v["status"] in ("DONE", "INTERRUPTED") for v in verdicts.values()), verdicts
    with open(sweep / "summary.csv") as f:
        rows = {r["job"]: r["status"] for r in csv.DictReader(f)}
    assert rows == {job: v["status"] for job, v in verdicts.items()}, (rows, out[-2000:])
    assert "sweep summary of" in out
    return verdicts


@pytest.mark.slow  # a basic-launcher sweep of 3 jobs stopped in its second: ~15 s
def test_ctrl_c_stops_a_sequential_sweep(tmp_path, data_root):
    process = start(*sweep_args(tmp_path, data_root), cwd=tmp_path)
    wait_for(lambda: steps(tmp_path / "sweep/1/metrics.csv") >= 3, process, tmp_path)
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    assert ended(process, tmp_path, sent) < BOUND_S
    verdicts = check_stopped_sweep(process, tmp_path, signal.SIGINT, running=["1"])
    assert "not started" in verdicts["2"]["error"] and verdicts["2"]["steps"] == 0, verdicts["2"]
    assert not group_alive(process.pid)


@pytest.mark.slow  # a joblib sweep of 3 jobs on 2 workers, stopped with the two long ones running: ~25 s each
@pytest.mark.parametrize(("signum", "to_group"), [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_signal_stops_a_parallel_sweep_and_its_workers(signum, to_group, tmp_path, data_root):
    """SIGTERM to the main process alone (kill PID), or Ctrl-C (the whole process group): every job stops, each
    running one with its verdict, the summary is written, and no worker is left behind."""
    args = sweep_args(tmp_path, data_root, "hydra/launcher=parallel", "hydra.launcher.n_jobs=2")
    process = start(*args, cwd=tmp_path)
    sweep = tmp_path / "sweep"
    wait_for(
        lambda: steps(sweep / "1/metrics.csv") >= 3 and steps(sweep / "2/metrics.csv") >= 3, process, tmp_path
    )
    workers = loky_workers(process.pid)
    assert len(workers) == 2, workers
    sent = time.monotonic()
    (os.killpg if to_group else os.kill)(process.pid, signum)
    seconds = ended(process, tmp_path, sent)
    check_stopped_sweep(process, tmp_path, signum, running=["1", "2"])
    # The workers exit with the main process, not a minute later; loky's resource tracker last, once the pipe
    # it reads from closes (it cleans up what the workers leaked first, which takes a moment on a loaded machine).
    deadline = time.monotonic() + 10
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)], "workers left behind"
    left = {pid: command_of(pid) for pid in group_alive(process.pid)}
    assert not left, f"processes of the sweep left behind: {left}"
    assert seconds < BOUND_S


# --- the corpus's tokenizing workers, the preparer, validation, submitit and Optuna sweeps --------------------------


def big_corpus(folder: Path, megabytes: int) -> Path:
    """Code-like text files of about `megabytes` MB in all: long enough to tokenize that a signal lands mid-way."""
    import random

    rng, words = random.Random(0), ["def", "return", "self", "value", "import", "class", "yield", "None"]
    folder.mkdir()
    for k in range(4):
        lines = (
            "    " * rng.randint(0, 2) + " ".join(rng.choices(words, k=rng.randint(1, 8))) + f"({i})\n"
            for i in range(megabytes * 6500)
        )
        (folder / f"f{k}.py").write_text("".join(lines))
    return folder


def no_traceback(out: str) -> None:
    for word in ("Traceback", "BrokenPipeError", "KeyboardInterrupt", "Interrupted"):
        assert word not in out, out[-3000:]


def prepare_process(cwd: Path, *args: str) -> subprocess.Popen:
    """`python -m harness.cli.prepare ARGS` in its own process group (as a shell job is), output to cwd/out.txt."""
    env = {**os.environ, "PYTHONPATH": FORK}
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli.prepare", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=open(cwd / "out.txt", "w"),  # noqa: SIM115  (the child holds it; closed with the test's tmp dir)
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


@pytest.mark.slow  # a 16 MB corpus tokenized by two workers, signalled mid-way: ~10 s each
@pytest.mark.parametrize(("signum", "to_group"), [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_signal_to_the_preparer_ends_it_in_one_line_and_no_worker_is_left(signum, to_group, tmp_path):
    files, root = big_corpus(tmp_path / "corpus", 4), tmp_path / "data"
    args = ("data=corpus", "tokenizer=char", f"data.files={files}", f"data.root={root}", "data.workers=2")
    process = prepare_process(tmp_path, *args)
    wait_for(lambda: "tokenizing" in (tmp_path / "out.txt").read_text(), process, tmp_path)
    sent = time.monotonic()
    (os.killpg if to_group else os.kill)(process.pid, signum)
    assert ended(process, tmp_path, sent) < BOUND_S
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode == 128 + signum, out[-3000:]
    assert out.strip().splitlines()[-1] == f"interrupted by {signal.Signals(signum).name}"
    no_traceback(out)
    time.sleep(1)
    assert not group_alive(process.pid), {pid: command_of(pid) for pid in group_alive(process.pid)}
    assert not [p for p in root.rglob("*") if p.suffix == ".bin" or p.name.startswith(".val")], (
        "half a folder"
    )


@pytest.mark.slow  # a run that tokenizes an 8 MB corpus with two workers first: ~20 s
def test_a_run_that_prepares_a_corpus_says_nothing_of_signals(tmp_path):
    """No signal sent: the pool ends its workers, and that is not the user's SIGTERM (it printed "SIGTERM
    received" and a traceback a worker)."""
    files, run = big_corpus(tmp_path / "corpus", 2), tmp_path / "run"
    process = start(
        "data=corpus", "tokenizer=char", "model=transformer", f"data.files={files}", "data.workers=2",
        f"data.root={tmp_path / 'data'}", "data.length=16", "n=1", "mode.max_steps=2", f"hydra.run.dir={run}",
        *QUICK, cwd=tmp_path,
    )  # fmt: skip
    process.wait(timeout=240)
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode in (0, 1), out[-3000:]  # judged: two steps need not memorize
    assert "prepared" in out and "received" not in out, out[-3000:]
    no_traceback(out)


@pytest.mark.slow  # a run signalled while it tokenizes its corpus: ~15 s
def test_signal_while_a_run_tokenizes_its_corpus(tmp_path):
    files, run = big_corpus(tmp_path / "corpus", 4), tmp_path / "run"
    process = start(
        "data=corpus", "tokenizer=char", "model=transformer", f"data.files={files}", "data.workers=2",
        f"data.root={tmp_path / 'data'}", "data.length=16", "n=1", f"hydra.run.dir={run}", *QUICK, cwd=tmp_path,
    )  # fmt: skip
    wait_for(lambda: "tokenizing" in (tmp_path / "out.txt").read_text(), process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, (signal.SIGTERM,), "data generation")
    assert seconds < BOUND_S
    no_traceback((tmp_path / "out.txt").read_text().replace("INTERRUPTED", ""))


@pytest.mark.slow  # a submitit local sweep of 2 long jobs, stopped by SIGTERM: ~40 s
def test_sigterm_stops_a_submitit_local_sweep_and_leaves_no_process(tmp_path, data_root):
    args = sweep_args(tmp_path, data_root, "hydra/launcher=local")
    args[args.index("mode.max_steps=10,100000,100001")] = "mode.max_steps=100000,100001"
    process = start(*args, cwd=tmp_path)
    sweep = tmp_path / "sweep"
    wait_for(
        lambda: steps(sweep / "0/metrics.csv") >= 3 and steps(sweep / "1/metrics.csv") >= 3, process, tmp_path
    )
    sent = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    seconds = ended(process, tmp_path, sent)
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode == 143, out[-3000:]
    verdicts = [read_verdict(sweep / job) for job in ("0", "1")]
    assert all(v["status"] == "INTERRUPTED" and v["steps"] > 0 for v in verdicts), verdicts
    assert (sweep / "summary.csv").is_file() and "Traceback" not in out
    deadline = time.monotonic() + 10
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: command_of(pid) for pid in group_alive(process.pid)}
    assert not left, f"processes of the sweep left behind: {left}"
    assert seconds < BOUND_S


@pytest.mark.slow  # an Optuna search stopped by Ctrl-C in its first trial: ~15 s
def test_ctrl_c_to_an_optuna_search_writes_the_summary(tmp_path, data_root):
    """It ended in Optuna's `ValueError: No trials are completed yet` and wrote no summary."""
    process = start(
        "-m", "experiment=search", "hydra.sweeper.n_trials=3", "mode.max_steps=100000", "mode.val_every=1000",
        "mode.log_every=1", "data.size=32", "data.batch_size=8", "data.length=8", f"data.root={data_root}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUICK, cwd=tmp_path,
    )  # fmt: skip
    wait_for(lambda: steps(tmp_path / "sweep/0/metrics.csv") >= 3, process, tmp_path)
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    assert ended(process, tmp_path, sent) < BOUND_S
    out = (tmp_path / "out.txt").read_text()
    assert process.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "No trials are completed" not in out, out[-3000:]
    with open(tmp_path / "sweep" / "summary.csv") as f:
        rows = {r["job"]: r["status"] for r in csv.DictReader(f)}
    assert rows == dict.fromkeys(("0", "1", "2"), "INTERRUPTED"), rows
