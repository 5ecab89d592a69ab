"""Signals land within a bounded time: real train.py processes are signalled in each phase of a run (and during
start-up), and whole sweeps of both local launchers, with no process left behind."""

from __future__ import annotations

import csv
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.errors import ConfigError
from harness.report.verdict import read_verdict
from harness.signals import Held, Interrupted, SignalGate, loky_workers, raise_received
from tests.conftest import PROBES_OFF, ROOT

FORK = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
#: what "within a few seconds" gets on a loaded two-core machine: a signal that waited for a phase to end would
#: take a minute (the slow phases below last 60 s or more)
BOUND_S = 25
QUICK = ["preflight=false", "mode.progress_bar=false", *PROBES_OFF]


def start(*args: str, cwd: Path, marker: Path | None = None) -> subprocess.Popen:
    """The real `python train.py ARGS` in its own process group (as a shell job is), output to cwd/out.txt."""
    env = {**os.environ, "PYTHONPATH": FORK, "OMP_NUM_THREADS": "1"}
    if marker is not None:
        env["SLOW_MARKER"] = str(marker)
    flags = [a for a in args if a.startswith("-")]
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *flags, *(a for a in args if not a.startswith("-"))],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=open(cwd / "out.txt", "w"),  # noqa: SIM115  (the child holds it; closed with the test's tmp dir)
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def wait_for(found, process: subprocess.Popen, cwd: Path, timeout: float = 240) -> None:
    """Return once `found()` is true; fail with the process's output if it ends or the time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found():
            return
        assert process.poll() is None, (cwd / "out.txt").read_text()[-3000:]
        time.sleep(0.05)
    raise TimeoutError((cwd / "out.txt").read_text()[-3000:])


def ended(process: subprocess.Popen, cwd: Path, since: float) -> float:
    """Seconds from `since` until `process` exits, bounded by BOUND_S."""
    try:
        process.wait(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("still running: " + (cwd / "out.txt").read_text()[-3000:]) from None
    return time.monotonic() - since


def steps(metrics: Path) -> int:
    if not metrics.is_file():
        return 0
    with open(metrics) as f:
        return sum(1 for r in csv.DictReader(f) if r.get("train/loss"))


def signal_and_check(process, cwd: Path, run_dir: Path, signums: tuple[int, ...], phase: str) -> float:
    """Send `signums` (1.5 s apart: a repeat within a second is the same request), then check the exit code,
    the verdict and the line that names the phase; the seconds from the last signal to the exit."""
    for i, signum in enumerate(signums):
        if i:
            time.sleep(1.5)
        sent = time.monotonic()
        process.send_signal(signum)
    seconds = ended(process, cwd, sent)
    out = (cwd / "out.txt").read_text()
    assert process.returncode == 128 + signums[0], out[-3000:]
    verdict = read_verdict(run_dir)
    assert verdict["status"] == "INTERRUPTED" and verdict["signal"] == signums[0], verdict
    assert f"INTERRUPTED by {signal.Signals(signums[0]).name} during {phase}" in out, out
    return seconds


# --- in-process: the gate itself ----------------------------------------------------------------------------


def test_gate_raises_at_once_defers_in_a_step_and_a_repeat_raises(monkeypatch):
    gate = SignalGate()
    with pytest.raises(Interrupted) as stop:
        gate.handle(signal.SIGTERM, None)
    assert stop.value.signum == signal.SIGTERM and gate.received == signal.SIGTERM
    step = SignalGate(deferring=True)
    step.handle(signal.SIGINT, None)  # inside a training step: noted, the step goes on
    assert step.received == signal.SIGINT
    step.handle(signal.SIGINT, None)  # the same Ctrl-C, passed on by a sweep's main process: not a second one
    monkeypatch.setattr(step, "_first_at", time.monotonic() - 2)
    with pytest.raises(Interrupted):  # a second signal: at once
        step.handle(signal.SIGTERM, None)
    held = SignalGate(holding=True)
    held.handle(signal.SIGTERM, None)  # writing the verdict: only noted
    assert held.received == signal.SIGTERM


def test_a_signal_inside_a_held_import_is_raised_after_it_and_a_lost_one_before_the_job():
    """Torch's import calls back into Python from C++: a handler raising there aborts the process (a pybind11
    error nobody catches) or leaves it to crash at exit. Held notes it and raises once the import is done; a
    signal a library's `except Exception` swallowed is raised by raise_received before the job starts."""
    gate = SignalGate()
    gate.install()
    try:
        with pytest.raises(Interrupted) as stop, Held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside: noted only
            survived = True
        assert survived and stop.value.signum == signal.SIGTERM and not gate.holding
        lost = SignalGate()
        lost.install()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        except Interrupted:  # what a C import turned into another exception, and a fallback swallowed
            pass
        with pytest.raises(Interrupted) as again:
            raise_received()
        assert again.value.signum == signal.SIGINT
        lost.restore()
    finally:
        gate.restore()
    raise_received()  # no gate of harness's: nothing to raise


def test_dataset_too_big_for_memory_is_refused_naming_the_key():
    from harness.data.sources.synthetic import SyntheticDataModule

    with pytest.raises(ConfigError, match=r"data\.length=.*GiB of memory.*lower data\.length or data\.size"):
        SyntheticDataModule(length=10**9, size=1000)
    SyntheticDataModule(length=64, size=1000)  # an ordinary one is not


def test_long_generation_is_announced_with_an_estimate(tmp_path, caplog):
    from harness.data.sources import synthetic

    data = synthetic.SyntheticDataModule(length=40, size=9, val_size=1, root=str(tmp_path))
    with caplog.at_level("WARNING"):
        data.build()
    assert not caplog.records, "a quick one is not announced"
    with caplog.at_level("WARNING"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(synthetic, "TOKENS_PER_S", 10)  # 400 tokens at 10 a second: 40 s
        data.build()
    assert "generating 10 examples of 40 tokens: about 40 s" in caplog.text


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
        "model._target_=tests.fork_models.SlowGRU",
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
        "+callbacks.slow_end._target_=tests.fork_models.SlowEnd",
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


class Sleepy(torch.nn.Module):
    """A model whose forward takes `seconds`: the preflight's unit of time, made long."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.embedding = seconds, torch.nn.Embedding(8, 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.embedding(input_ids)


def test_a_long_preflight_is_announced_with_its_estimate(monkeypatch, caplog):
    from harness.checks import preflight

    batch = {"input_ids": torch.zeros(4, 16, dtype=torch.long)}
    caplog.set_level(logging.WARNING, logger="harness.checks.preflight")
    assert preflight.announce(Sleepy(0.0), batch) < preflight.ANNOUNCE_S and not caplog.records
    monkeypatch.setattr(preflight, "ANNOUNCE_S", 0.2)
    estimate = preflight.announce(Sleepy(0.05), batch)
    assert estimate >= preflight.PASSES * 0.05
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"preflight: about {estimate:.0f} s ahead (6 passes over 4 examples of 16 tokens")
    assert "preflight=false skips it" in line


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
        f"data.root={data_root}", *args, "+callbacks.slow._target_=tests.fork_models.SlowValidation",
        f"hydra.run.dir={run}", cwd=tmp_path, marker=marker,
    )  # fmt: skip
    wait_for(marker.exists, process, tmp_path)
    seconds = signal_and_check(process, tmp_path, run, (signal.SIGTERM,), "validation")
    assert seconds < BOUND_S and read_verdict(run)["steps"] == 4
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    resumed = train(make_config(*args, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", run_dir=run))
    straight = train(make_config(*args, run_dir=tmp_path / "straight"))
    assert (run / "metrics.csv").read_text() == (tmp_path / "straight" / "metrics.csv").read_text()
    for key in ("status", "steps", "final_loss", "val_loss", "accuracy", "p_correct"):
        assert resumed[key] == straight[key], (key, resumed, straight)


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
