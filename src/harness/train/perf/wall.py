"""A run's whole wall time by phase, verdict.json's perf.wall (`RunClock`): start-up from the process's start
(`command_clock`, around cli.main), the data's preparation, the model's construction, the preflight, the Trainer's set-up, the training loop (the Speed's),
its end; the page and the exit added to verdict.json when the process exits."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: where cli.main leaves `<pid>:<the process's start, seconds since the epoch>` for the task it runs, while it runs
#: (a child process inherits it: the pid says whose it is)
STARTED = "HARNESS_STARTED"
#: perf.wall's phases of the training loop, each the loop's phases (timeline.PHASES) it sums; its `setup` goes to
#: the Trainer's set-up, its `finish` to the end
LOOP = {
    "steps": ("data_wait", "forward_backward", "optimizer", "harness", "other"),
    "validation": ("validation",),
    "checkpoint": ("checkpoint",),
}


def process_start() -> float:
    """When this process started, in seconds since the epoch: /proc/self/stat's start time, else now."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, after the command's name
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux: counted from cli.main's start
        return time.time()
    return time.time() - max(age, 0.0)


@contextlib.contextmanager
def command_clock():
    """Around cli.main: the process's start in STARTED for the task the command runs; taken out after."""
    os.environ[STARTED] = f"{os.getpid()}:{process_start()!r}"
    try:
        yield
    finally:
        os.environ.pop(STARTED, None)


def _own_start() -> float | None:
    """The process's start that cli.main left in STARTED, if this process is the one that left it."""
    pid, _, started = os.environ.get(STARTED, "").partition(":")
    try:
        return float(started) if int(pid) == os.getpid() else None
    except ValueError:
        return None


def _sweeping() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class RunClock:
    """The training task's marks on the wall clock (`enter`), and perf.wall from them (`stamp`). Counted from the
    process's start where the task is the command's own run; from the task's start in a sweep's job (the jobs
    share a process, or a pool's) and under `harness.run` from code."""

    def __init__(self):
        now, started = time.time(), _own_start()
        self.own = started is not None and not _sweeping()  # the command's own run: start-up and exit counted
        self.marks = {"startup": min(started, now)} if self.own else {}
        self.marks["data"] = now  # phase -> when it started; "model" entered once the data is ready

    def enter(self, phase: str) -> None:
        """`phase` starts now."""
        self.marks[phase] = time.time()

    def stamp(self, verdict, run_dir: Path) -> None:
        """perf.wall of `verdict` (one with `perf`), the run's time until now by phase; where the run is the
        command's own, verdict.json is given the page's and the exit's seconds when the process exits."""
        perf = verdict.items.get("perf")
        if not isinstance(perf, dict):
            return
        now, loop = time.time(), perf.pop("loop", None)  # the loop's start and end, from the Speed
        seconds = self._seconds(now, loop, perf.get("time_share") or {}, verdict.preflight_seconds or 0.0)
        perf["wall"] = _wall(seconds, now - next(iter(self.marks.values())), "verdict")
        if self.own:
            atexit.register(_at_exit, Path(run_dir) / "verdict.json", perf["wall"], now)

    def _seconds(self, now: float, loop: dict | None, shares: dict, preflight: float) -> dict[str, float]:
        """Each phase's seconds: start-up, the data's preparation and the model's construction by the marks, the
        preflight its own seconds, then the Trainer's set-up until the loop, the loop split by its phases' shares,
        and its end until now."""
        marks, spans = self.marks, {}
        checked = marks.get("preflight", now)
        built = min(marks.get("model", checked), checked)
        if "startup" in marks:
            spans["startup"] = marks["data"] - marks["startup"]
        spans["data"], spans["model"] = built - marks["data"], checked - built
        spans["preflight"] = min(preflight, now - checked)
        fit = checked + spans["preflight"]  # the preflight's end: the Trainer is built
        started = min(max(loop["started"] if loop else now, fit), now)
        ended = min(max(loop["ended"] if loop else now, started), now)
        span = ended - started
        spans["trainer"] = started - fit + span * (shares.get("setup") or 0.0)  # and the fit's end
        for name, phases in LOOP.items():
            spans[name] = span * sum(shares.get(phase) or 0.0 for phase in phases)
        spans["end"] = now - ended + span * (shares.get("finish") or 0.0)
        return spans


def _wall(seconds: dict[str, float], total: float, until: str) -> dict:
    """perf.wall: each phase's seconds and share of `total`, the total, and the last moment counted."""
    return {
        "seconds": {phase: round(s, 3) for phase, s in seconds.items()},
        "share": {phase: round(s / total, 4) if total > 0 else None for phase, s in seconds.items()},
        "total": round(total, 3),
        "until": until,
    }


def _at_exit(path: Path, stamped: dict, at: float) -> None:
    """verdict.json's perf.wall given the page (until report.html's writing) and the exit (until now), if the
    file still holds the wall stamped `at` (a rank that did not write it leaves it alone)."""
    from harness.report.verdict import write_atomic  # here: cli.main imports this module before its door

    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        perf = values.get("perf") if isinstance(values, dict) else None
        if not isinstance(perf, dict) or perf.get("wall") != stamped:
            return
        now, page = time.time(), path.with_name("report.html")
        written = page.stat().st_mtime if page.is_file() else at
        written = written if at <= written <= now else at  # an older page is another run's
        seconds = {**stamped["seconds"], "page": written - at, "exit": now - written}
        perf["wall"] = _wall(seconds, stamped["total"] + now - at, "exit")
        write_atomic(path, json.dumps(values, indent=2) + "\n")
    except (OSError, ValueError) as err:  # the verdict stands as written: its wall counted until it was
        log.warning("perf.wall: the page and the exit not added to %s (%s)", path, err)
