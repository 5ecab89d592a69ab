"""What the signal tests share: a real train.py started, waited on until a phase shows, signalled, and held to
the bound a signal must land within (BOUND_S) with an INTERRUPTED verdict naming the signal and the phase."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.report.verdict import read_verdict
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
