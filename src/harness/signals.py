"""What SIGINT, SIGTERM and SIGUSR2 do at every moment of a run or a sweep: a run stops with an INTERRUPTED verdict
and exits 128 + the signal, a sweep stops every job. Exports the gate (SignalGate, Interrupted), `guarded`, the
holds (Held, Noted, CalmStart) and the sweep's SweepStop. Imports nothing heavy."""

# A training step is finished and checkpointed first (harness.train.interrupt.StopOnSignal); anywhere else the
# handler raises Interrupted at once, and a second signal raises at once everywhere. train.py's first handler is
# installed before torch is imported.

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

#: Ctrl-C, a polite kill (and SLURM at the time limit), and the warning SLURM sends ahead of the time
#: limit when asked (the submitit launcher asks for SIGUSR2 signal_delay_s before it)
SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGUSR2,) if hasattr(signal, "SIGUSR2") else ()))

#: a repeat within this many seconds of the first signal is the same request, not a second one: Ctrl-C in a
#: terminal reaches every process of the group, and a sweep's main process passes it on to its workers too
REPEAT_WINDOW_S = 1.0

#: in a sweep dir: the signal that stopped the sweep; a job that has not started yet sees it and does not start
MARKER = ".interrupted"


# a BaseException, as KeyboardInterrupt: no `except Exception` on its way (a library's fallback, Hydra's job
# runner, a job's error verdict) mistakes it for an error and goes on
class Interrupted(BaseException):
    """A signal stopped the run; `signum` is its number."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


class SignalGate:
    """The handler of SIGNALS: records the first in `received` and raises Interrupted, unless `deferring` (inside a
    training step) or `holding`. A repeat raises even while deferring."""

    def __init__(self, deferring: bool = False, holding: bool = False):
        self.received: int | None = None
        self.deferring, self.holding = deferring, holding
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def handle(self, signum, frame) -> None:
        now = time.monotonic()
        repeat = self.received is not None
        if not repeat:
            self.received, self._first_at = signum, now
        elif now - self._first_at < REPEAT_WINDOW_S:
            return
        self.noticed(signum, repeat)
        if self.holding or (self.deferring and not repeat):
            return
        raise Interrupted(self.received)

    def noticed(self, signum: int, repeat: bool) -> None:
        """Log the signal and what the gate does with it (subclasses do more)."""
        if self.holding:
            action = "noted"
        elif self.deferring and not repeat:
            action = "stopping after this step (again: at once)"
        else:
            action = "stopping now"
        log.warning("%s received%s: %s", signal.Signals(signum).name, " again" if repeat else "", action)

    def install(self) -> None:
        for signum in SIGNALS:
            # the first handler found is what restore() puts back
            self._previous.setdefault(signum, signal.signal(signum, self.handle))

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


def _leave_at_once() -> None:
    """From now on (the process is exiting) a signal ends the process at once with 128 + its number."""

    def leave(signum, frame) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    for signum in SIGNALS:
        signal.signal(signum, leave)


def _ignore_from_now() -> None:
    """Ignore SIGNALS for the rest of the process's life (registered with atexit first, so run last)."""
    # Python's finalization puts the default action back in place of a Python handler (not of an ignored signal):
    # a signal during torch's seconds of teardown would otherwise kill the process with no exit code of its own
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def guarded():
    """Around a whole command: a signal ends the process with one line and exit 128 + its number."""
    import atexit

    gate = SignalGate()
    gate.install()
    atexit.register(_ignore_from_now)  # the first registered, the last run
    try:
        yield
    except Interrupted as stop:
        print(f"interrupted by {signal.Signals(stop.signum).name}", file=sys.stderr)
        sys.exit(128 + stop.signum)
    except Exception:
        if gate.received is None:  # else Interrupted raised inside a C extension's import came back as this
            raise
        print(f"interrupted by {signal.Signals(gate.received).name}", file=sys.stderr)
        sys.exit(128 + gate.received)
    finally:
        _leave_at_once()


def run_guarded(work) -> None:
    """`work()` inside guarded()."""
    with guarded():
        work()


# torch's import calls back into Python from C++: an exception raised there aborts the process or leaves it to
# crash at exit; fork's hooks swallow what a handler raises
class Held:
    """Inside, the gate only notes a signal; on leaving, one that came meanwhile is raised as Interrupted. For code
    a Python exception must not cross: a C extension's import, fork's own hooks."""

    def __enter__(self) -> Held:
        self.gate = gate_of(signal.getsignal(signal.SIGTERM))
        self.before = self.gate.received if self.gate else None
        self.holding = self.gate.holding if self.gate else False
        if self.gate is not None:
            self.gate.holding = True
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self.gate is not None:
            self.gate.holding = self.holding
        if kind is None:
            self.check()

    def check(self) -> None:
        """Raise Interrupted for a signal that came while held, as the gate would have."""
        gate = self.gate
        if gate is None or gate.received is None or gate.received == self.before:
            return
        if not (gate.holding or gate.deferring):
            raise Interrupted(gate.received)


class Noted(Held):
    """Inside, a signal is only noted, also on leaving: for work after the verdict is written (its page)."""

    def check(self) -> None:
        return


class CalmStart(Held):
    """Around starting a pool's workers: SIGNALS blocked, so a worker starts with them blocked until `calm_worker`
    runs; a signal meanwhile is raised by `check()`."""

    def __enter__(self) -> CalmStart:
        super().__enter__()
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        return self

    def __exit__(self, *exc) -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        if self.gate is not None:
            self.gate.holding = self.holding


def calm_worker() -> None:
    """A pool worker's initializer (started inside CalmStart): SIGTERM ends it silently, the others are ignored."""
    # SIGTERM is how the pool ends a worker: the default action, not the inherited handler's "SIGTERM received"
    # line and traceback; Ctrl-C, which a terminal sends to every process, is ignored
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def received() -> int | None:
    """The signal the installed gate has received, or None (none yet, or no gate)."""
    gate = gate_of(signal.getsignal(signal.SIGTERM))
    return None if gate is None else gate.received


def raise_received() -> None:
    """Raise Interrupted for a signal the gate received but that was lost on its way (inside a C extension)."""
    gate = gate_of(signal.getsignal(signal.SIGTERM))
    if gate is not None and gate.received is not None and not (gate.holding or gate.deferring):
        raise Interrupted(gate.received)


def gate_of(handler) -> SignalGate | None:
    """The SignalGate whose handler `handler` is, else None."""
    owner = getattr(handler, "__self__", None)
    return owner if isinstance(owner, SignalGate) else None


def handled_here() -> bool:
    """Whether harness's gate handles signals in this process (not in a submitit job: submitit handles those)."""
    return gate_of(signal.getsignal(signal.SIGTERM)) is not None


def guard_worker() -> None:
    """In a joblib (loky) worker, install a gate that only notes a signal arriving between jobs."""
    # a killed worker would make the launcher kill every other before they write their verdicts
    import multiprocessing

    if multiprocessing.current_process().name.startswith("LokyProcess") and not handled_here():
        SignalGate(holding=True).install()


def mark_stopped(sweep_dir: Path, signum: int) -> None:
    """Record in the sweep dir that `signum` stopped the sweep (jobs not started yet do not start); the first
    recorded stays."""
    marker = Path(sweep_dir) / MARKER
    if not marker.exists():
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{signum}\n")


def stop_signal(sweep_dir: Path) -> int | None:
    """The signal that stopped the sweep in `sweep_dir`, or None while it runs."""
    marker = Path(sweep_dir) / MARKER
    try:
        return int(marker.read_text().strip() or signal.SIGTERM)
    except (FileNotFoundError, ValueError):
        return None


def children(pid: int) -> dict[int, bytes]:
    """`pid`'s child processes -> their command lines, from /proc (none where /proc is not)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    commands = {}
    for child in found:
        try:
            commands[child] = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
    return commands


def loky_workers(pid: int) -> list[int]:
    """The joblib (loky) worker processes among `pid`'s children, loky's resource tracker left out."""
    return [c for c, cmd in children(pid).items() if b"loky" in cmd and b"resource_tracker" not in cmd]


def _submitit_jobs(pid: int) -> list[int]:
    """The submitit controllers among `pid`'s children (hydra/launcher=local), one a job."""
    return [c for c, cmd in children(pid).items() if b"submitit.local._local" in cmd]


# joblib's workers get the signal itself, submitit's controllers SIGTERM (the one they pass on to their job); a
# basic launcher's job runs in this process under its own handler. Raising inside a launcher would leave its jobs
# running, or kill them before they write a verdict.
class SweepStop(SignalGate):
    """The gate of a sweep's launching process (installed by harness.report.summary.SweepSummary): a signal marks
    the sweep dir stopped and is passed on to the jobs in other processes. It never raises."""

    def __init__(self, sweep_dir: Path):
        super().__init__(holding=True)
        self.sweep_dir = Path(sweep_dir)

    def install(self) -> None:
        (self.sweep_dir / MARKER).unlink(missing_ok=True)  # a sweep dir given again starts unstopped
        super().install()

    def noticed(self, signum: int, repeat: bool) -> None:
        mark_stopped(self.sweep_dir, self.received)
        passed = []
        for pids, sent in (
            (loky_workers(os.getpid()), signum),
            (_submitit_jobs(os.getpid()), signal.SIGTERM),
        ):
            for pid in pids:
                try:
                    os.kill(pid, sent)
                except ProcessLookupError:
                    continue
                passed.append(pid)
        log.warning(
            "%s received%s: stopping the sweep%s",
            signal.Signals(signum).name,
            " again" if repeat else "",
            f" (passed on to {', '.join(map(str, passed))})" if passed else "",
        )
