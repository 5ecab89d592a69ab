"""A rank that dies or stops is named within seconds, and the run ends with a verdict rather than a collective's
traceback, or a wait as long as the process group's timeout (30 minutes) holding every device of the job.

Every rank of a run on several processes beats (harness.train.distributed.heartbeat) and reads the others' heartbeats, from a
thread of its own, once a beat (watchdog.beat_s). The run ends when

- a rank's process has ended before training did (RANK_LOST): seen at the next beat, or as soon as a collective
  fails on a survivor (its main thread asks here before it calls the error a bug). A rank this process started
  (Lightning's launcher: rank 0 of each machine starts the others) is named with its exit code or signal;
- no rank has moved on (a step, a validation batch) for watchdog.stall_s while one waits for the others
  (RANK_STALLED). Named: the ranks that have not beaten for watchdog.silent_s (stopped, or frozen in C code),
  else those behind (a lower step, or not waiting while the others wait in a collective). Not a stall while a
  rank still beating is in one long operation (checkpointing, compiling): the process group's own timeout bounds
  that.

The lowest rank not named writes the verdict (harness.tasks.training.lost_verdict); each survivor ends the named
ranks it can reach (those on its machine: SIGKILL, which a stopped process obeys too), and exits. A survivor whose
main thread is stuck in a collective that nothing will end (NCCL, where a dead peer raises nothing) is ended by
this thread, after its verdict is written."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytorch_lightning as pl

from harness.train.distributed.heartbeat import (
    ENDED,
    LONG,
    RAISED,
    WAITING,
    Beat,
    alive,
    born,
    final,
    machine_id,
    main_phase,
    read_beats,
    write_beat,
)

log = logging.getLogger(__name__)

#: the statuses of a run ended by a rank (their exit codes: harness.report.verdict.EXIT_CODES); a rank that raised
#: an error of its own ends the run as ERROR, named the same way
LOST, STALLED, ERROR = "RANK_LOST", "RANK_STALLED", "ERROR"
#: seconds the watchdog's thread leaves the main thread to take over a fault (to write the verdict and exit as any
#: run does) once the named ranks are ended, before it writes the verdict and exits itself
GRACE_S = 10.0


@dataclass
class Named:
    """A rank the watchdog names, and what it knows of it."""

    rank: int
    what: str  # killed by SIGKILL | exited with 1 | ended | no heartbeat for 31 s | behind: ...
    pid: int | None = None
    host: str | None = None
    step: int | None = None
    phase: str | None = None
    where: str | None = None


@dataclass
class Fault:
    """Why the run ends: RANK_LOST or RANK_STALLED, the ranks named, the rank that writes the verdict."""

    status: str
    named: list[Named]
    writer: int
    step: int  # the step the rank that found it had reached

    def line(self) -> str:
        """One line for the console: which rank, what happened, at which step, doing what."""
        parts = []
        for n in self.named:
            last = f" (last seen at step {n.step}, in {n.phase})" if n.phase else ""
            parts.append(f"rank {n.rank}{f' pid {n.pid}' if n.pid else ''} {n.what}{last}")
        return f"{self.status} after step {self.step}: {'; '.join(parts)}"

    def as_dict(self) -> dict:
        return {"ranks": [asdict(n) for n in self.named], "seen_by": self.writer, "step": self.step}


class RankLost(Exception):
    """Training ended because a rank died or stalled (the Fault says which)."""

    def __init__(self, fault: Fault):
        self.fault = fault
        super().__init__(fault.line())


@dataclass
class Heard:
    """What this rank has heard of another: its last heartbeat, and when (this process's monotonic clock, so that
    machines' clocks need not agree) its beat count and its moves last changed."""

    beat: Beat
    heard: float
    moved: float


def judge(heard: dict[int, Heard], world: int, now: float, since: float, stall_s: float, silent_s: float):
    """The stall in what this rank has heard of ranks 0..world-1 (`since`: when it began listening), as
    (status, named ranks) or None: no rank moved on for `stall_s` while one waits or is silent. Pure: tested on its
    own."""
    running = {r: h for r, h in heard.items() if not final(h.beat)}
    moved = max([h.moved for h in heard.values()] + [since])
    if now - moved < stall_s:
        return None
    silent = [
        r for r in range(world) if r not in heard or (r in running and now - heard[r].heard >= silent_s)
    ]
    if silent:
        return [
            Named(r, f"no heartbeat for {now - heard[r].heard:.0f} s", **placed(heard[r].beat))
            if r in heard
            else Named(r, f"no heartbeat in {now - since:.0f} s: it never reported")
            for r in silent
        ]
    if any(h.beat.phase in LONG for h in running.values()):
        return None  # one long operation, still beating: the process group's timeout bounds it
    waiting = {r for r, h in running.items() if h.beat.phase.split(" (")[0] in WAITING}
    if not waiting:
        return None  # nobody waits for anybody: not a stall between ranks
    top = max(h.beat.step for h in running.values())
    behind = [r for r, h in running.items() if h.beat.step < top] or sorted(set(running) - waiting)
    if behind:
        why = f"behind: no progress for {now - moved:.0f} s while the others wait in a collective"
        return [Named(r, why, **placed(running[r].beat)) for r in behind]
    why = f"waits in a collective no other rank joined, for {now - moved:.0f} s (the ranks called different ones)"
    return [Named(r, why, **placed(h.beat)) for r, h in sorted(running.items())]


def placed(beat: Beat) -> dict:
    """A named rank's whereabouts, from its heartbeat."""
    return {
        "pid": beat.pid,
        "host": beat.host,
        "step": beat.step,
        "phase": beat.phase,
        "where": beat.where,
    }


def ended(returncode: int) -> str:
    """A process's exit, in words: `killed by SIGKILL`, `exited with 1`."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with {returncode}"


def in_log(level: int, message: str) -> None:
    """A detail the console need not show (it has the verdict's one line): to the run's log file alone."""
    record = log.makeRecord(log.name, level, __file__, 0, message, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and level >= handler.level:
            handler.handle(record)


class RankWatch(pl.Callback):
    """This rank's heartbeat, and the watchdog reading every rank's (the module's docstring says what it does).
    `on_fault(fault)`: what ends the run from the watchdog's thread when the main thread cannot (it writes the
    verdict where this rank is the writer, and returns the exit code). Does nothing on one process."""

    def __init__(
        self,
        run_dir: Path,
        stall_s: float,
        beat_s: float,
        silent_s: float,
        on_fault: Callable[[Fault], int],
    ):
        self.run_dir, self.on_fault = Path(run_dir), on_fault
        self.stall_s, self.beat_s, self.silent_s = stall_s, beat_s, silent_s
        self.rank, self.world, self.attempt = 0, 1, ""
        self.step = self.moves = self.count = 0
        self.children: dict[int, object] = {}  # rank -> the Popen of a rank this process started
        self.heard: dict[int, Heard] = {}
        self.fault: Fault | None = None
        self.taken, self.stopping, self.lock = threading.Event(), threading.Event(), threading.Lock()
        self.thread: threading.Thread | None = None
        self.since = 0.0
        self.born: int | None = None  # this process's start (harness.train.distributed.heartbeat.born)
        self.machine = ""  # where its pid means it (harness.train.distributed.heartbeat.machine_id)
        self.trainer = self.module = None

    # --- the rank's own progress, from the main thread ------------------------------------------------------

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.world_size == 1 or self.thread is not None:
            return
        from harness.compat import stand_down_child_observer

        self.trainer, self.module = trainer, pl_module
        self.rank, self.world = trainer.global_rank, trainer.world_size
        # one id all ranks agree on: a restarted job's ranks do not read the heartbeats its last attempt left
        self.attempt = trainer.strategy.broadcast(uuid.uuid4().hex if self.rank == 0 else None)
        procs = stand_down_child_observer()
        self.children = {self.rank + i: proc for i, proc in enumerate(procs, start=1)}
        self.since, self.born, self.machine = time.monotonic(), born(os.getpid()), machine_id()
        self.publish("the start of training")
        self.thread = threading.Thread(target=self.run, name="harness-rank-watch", daemon=True)
        self.thread.start()

    def on_train_start(self, trainer, pl_module) -> None:
        self.step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.step, self.moves = trainer.global_step, self.moves + 1

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self.moves += 1

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.close(ENDED)

    def close(self, ending: str) -> None:
        """Training is over for this rank (Lightning's teardown, or harness.tasks.training.fit when an error left
        it, which Lightning's teardown hook does not see): the watchdog stops, the main thread ends the run itself,
        and the last heartbeat says how (ENDED, or RAISED and the error: the others then do not take it for lost)."""
        if self.thread is None or self.stopping.is_set():
            return
        self.taken.set()
        self.stopping.set()
        self.thread.join(timeout=5 * self.beat_s)
        self.publish(ending)

    # --- the watchdog's thread ------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.beat_s):
                self.publish()
                fault = self.look()
                if fault is not None:
                    self.act(fault)
                    return
        except Exception:  # a watchdog that stops must say so: the others will see this rank silent
            log.exception("the watchdog stopped")

    def publish(self, phase: str | None = None) -> None:
        """Write this rank's heartbeat; its phase read from the main thread's stack unless given."""
        phase, where = (phase, "") if phase else main_phase()
        self.count += 1
        beat = Beat(
            self.rank, os.getpid(), socket.gethostname(), self.born, self.attempt, self.machine,
            step=self.step, moves=self.moves, phase=phase, where=where, count=self.count,
        )  # fmt: skip
        try:
            write_beat(self.run_dir, beat)
        except OSError as err:  # a full disk: the others will see this rank silent, which says as much
            log.debug("heartbeat not written: %s", err)

    def look(self, failed: bool = False) -> Fault | None:
        """The fault in every rank's heartbeat now (the first one found stays), or None. `failed`: a collective
        has failed here, so a rank silent for silent_s is lost (on another machine, its process cannot be seen)."""
        with self.lock:
            if self.fault is None:
                self.fault = self.found(time.monotonic(), failed)
            return self.fault

    def found(self, now: float, failed: bool = False) -> Fault | None:
        beats = read_beats(self.run_dir, self.world, self.attempt)
        for rank, beat in beats.items():
            before = self.heard.get(rank)
            if before is None or before.beat.count != beat.count:
                moved = now if before is None or before.beat.moves != beat.moves else before.moved
                self.heard[rank] = Heard(beat, now, moved)
        raised = [
            Named(r, beat.phase, **{**placed(beat), "phase": None})  # what it did is what it raised
            for r, beat in sorted(beats.items())
            if r != self.rank and beat.phase.startswith(RAISED)
        ]
        if raised:  # its own error ended it (its log has the traceback): the run's error, not a rank lost
            return self.fault_of(ERROR, raised)
        gone = []
        for rank, proc in self.children.items():
            beat = beats.get(rank)
            if proc.poll() not in (None, 0) and not (beat and final(beat)):
                gone.append(
                    Named(rank, ended(proc.returncode), **(placed(beat) if beat else {"pid": proc.pid}))
                )
        for rank, beat in sorted(beats.items()):
            if rank == self.rank or rank in self.children or final(beat):
                continue
            if alive(beat, self.machine) is False:
                gone.append(Named(rank, "ended (its exit status is its parent's to read)", **placed(beat)))
        if failed and not gone:
            gone = [
                Named(
                    r, f"no heartbeat for {now - h.heard:.0f} s since a collective failed", **placed(h.beat)
                )
                for r, h in sorted(self.heard.items())
                if r != self.rank and not final(h.beat) and now - h.heard >= self.silent_s
            ]
        if gone:
            return self.fault_of(LOST, gone)
        named = judge(self.heard, self.world, now, self.since, self.stall_s, self.silent_s)
        return None if named is None else self.fault_of(STALLED, named)

    def fault_of(self, status: str, named: list[Named]) -> Fault:
        """The fault, its writer the lowest rank still there: not named, not ended, not seen gone."""
        out = {n.rank for n in named}
        for rank, proc in self.children.items():
            if proc.poll() is not None:
                out.add(rank)
        for rank, h in self.heard.items():
            if rank != self.rank and (final(h.beat) or alive(h.beat, self.machine) is False):
                out.add(rank)
        writer = min((r for r in range(self.world) if r not in out), default=self.rank)
        return Fault(status, named, writer, self.step)

    def act(self, fault: Fault) -> None:
        """End the named ranks this machine can reach; leave the main thread GRACE_S to take over (a collective
        that lost its peer fails at once on gloo); else write the verdict (the writer) and exit from here."""
        in_log(logging.ERROR, fault.line())
        self.end_named(fault)
        if self.taken.wait(GRACE_S):
            return
        code = 1
        try:
            code = self.on_fault(fault)
        except Exception:  # the verdict could not be written: the process ends all the same
            log.exception("the verdict of %s could not be written", fault.status)
        finally:
            for handler in logging.getLogger().handlers:
                handler.flush()
            os._exit(code)

    def end_named(self, fault: Fault) -> None:
        """SIGKILL each named rank still running on this machine (checked to be the very process that beat); not
        one that raised an error of its own, which is ending by itself, writing its traceback."""
        if fault.status == ERROR:
            return
        for named in fault.named:
            beat = self.heard.get(named.rank)
            if named.rank == self.rank or beat is None or alive(beat.beat, self.machine) is not True:
                continue
            try:
                os.kill(beat.beat.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            in_log(logging.WARNING, f"rank {named.rank} (pid {beat.beat.pid}) ended with SIGKILL")
            if named.rank in self.children:  # this process started it: its exit is ours to collect
                self.children[named.rank].wait(timeout=5)

    # --- the main thread, once a collective failed ----------------------------------------------------------

    def explain(self, err: BaseException) -> Fault | None:
        """The fault behind `err`, an error the main thread met (a collective that lost its peer), found within
        silent_s and two beats; None: no rank is gone, silent or stalled, the error is this rank's own. The main thread then ends the run
        itself (the watchdog's thread leaves it to)."""
        if self.world == 1:
            return None
        deadline = time.monotonic() + self.silent_s + 2 * self.beat_s
        while True:
            fault = self.look(failed=True)
            if fault is not None or time.monotonic() > deadline:
                break
            time.sleep(self.beat_s / 4)
        if fault is not None:
            self.taken.set()
            self.end_named(fault)
        return fault

    def writes(self, fault: Fault) -> bool:
        """Whether this rank writes the fault's verdict: the writer, unless the fault is rank 0's own error (rank 0
        wrote its verdict, with its traceback, before it exited)."""
        own_error = fault.status == ERROR and any(n.rank == 0 for n in fault.named)
        return fault.writer == self.rank and not own_error
