"""A rank that dies or stops, named within seconds: `RankWatch` beats and reads every rank's heartbeat; a
process gone is RANK_LOST, no rank moving on while one waits RANK_STALLED, and the run ends with a verdict."""

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
    is_last_beat,
    machine_id,
    main_phase,
    read_beats,
    start_ticks,
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
    """Training ended because a rank died or stalled (`fault` says which)."""

    def __init__(self, fault: Fault):
        self.fault = fault
        super().__init__(fault.line())


@dataclass
class Heard:
    """What this rank heard of another: its last beat, and when (monotonic) its count and moves changed."""

    beat: Beat
    heard: float
    moved: float


def stalled_ranks(
    heard: dict[int, Heard], world: int, now: float, since: float, stall_s: float, silent_s: float
):
    """The ranks to name for a stall, or None: no rank moved on for `stall_s` while one waits or is silent."""
    running = {r: h for r, h in heard.items() if not is_last_beat(h.beat)}
    moved = max([h.moved for h in heard.values()] + [since])
    if now - moved < stall_s:
        return None
    silent = [
        r for r in range(world) if r not in heard or (r in running and now - heard[r].heard >= silent_s)
    ]
    if silent:  # stopped, or frozen in C code
        return [
            Named(r, f"no heartbeat for {now - heard[r].heard:.0f} s", **_whereabouts(heard[r].beat))
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
    # behind: a lower step, else not waiting while the others wait
    behind = [r for r, h in running.items() if h.beat.step < top] or sorted(set(running) - waiting)
    if behind:
        why = f"behind: no progress for {now - moved:.0f} s while the others wait in a collective"
        return [Named(r, why, **_whereabouts(running[r].beat)) for r in behind]
    why = f"waits in a collective no other rank joined, for {now - moved:.0f} s (the ranks called different ones)"
    return [Named(r, why, **_whereabouts(h.beat)) for r, h in sorted(running.items())]


def _whereabouts(beat: Beat) -> dict:
    """A named rank's whereabouts (pid, host, step, phase, where), from its heartbeat."""
    return {
        "pid": beat.pid,
        "host": beat.host,
        "step": beat.step,
        "phase": beat.phase,
        "where": beat.where,
    }


def exit_in_words(returncode: int) -> str:
    """A process's exit in words: `killed by SIGKILL`, `exited with 1`."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with {returncode}"


def log_to_file_only(level: int, message: str) -> None:
    """Log `message` to the run's log file alone: the console has the verdict's one line."""
    record = log.makeRecord(log.name, level, __file__, 0, message, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and level >= handler.level:
            handler.handle(record)


class RankWatch(pl.Callback):
    """This rank's heartbeat, and the watchdog thread reading every rank's; `on_fault` ends the run from it."""

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
        self.start_ticks: int | None = None  # this process's start (heartbeat.start_ticks)
        self.machine = ""  # where its pid means this process (heartbeat.machine_id)
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
        self.since, self.start_ticks, self.machine = time.monotonic(), start_ticks(os.getpid()), machine_id()
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
        """Training is over for this rank: the watchdog stops, and the last heartbeat says how (`ending`)."""
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
                fault = self.fault_now()
                if fault is not None:
                    self.end_run(fault)
                    return
        except Exception:  # a watchdog that stops must say so: the others will see this rank silent
            log.exception("the watchdog stopped")

    def publish(self, phase: str | None = None) -> None:
        """Write this rank's heartbeat; its phase read from the main thread's stack unless given."""
        phase, where = (phase, "") if phase else main_phase()
        self.count += 1
        beat = Beat(
            self.rank, os.getpid(), socket.gethostname(), self.start_ticks, self.attempt, self.machine,
            step=self.step, moves=self.moves, phase=phase, where=where, count=self.count,
        )  # fmt: skip
        try:
            write_beat(self.run_dir, beat)
        except OSError as err:  # a full disk: the others will see this rank silent, which says as much
            log.debug("heartbeat not written: %s", err)

    def fault_now(self, failed: bool = False) -> Fault | None:
        """The fault in every rank's heartbeat now (the first found stays), or None; `failed`: a collective
        failed."""
        with self.lock:  # `failed`: a rank silent for silent_s is lost (another machine's process is unseen)
            if self.fault is None:
                self.fault = self.read_fault(time.monotonic(), failed)
            return self.fault

    def read_fault(self, now: float, failed: bool = False) -> Fault | None:
        """The fault the heartbeats show at `now`: a rank's own error, a rank gone, or a stall; None."""
        beats = read_beats(self.run_dir, self.world, self.attempt)
        for rank, beat in beats.items():
            before = self.heard.get(rank)
            if before is None or before.beat.count != beat.count:
                # one long operation still beating counts as moving on: the stall clock starts where it ends,
                # not where it began (the others, waiting for it, would be named the moment it ends)
                going = before is None or before.beat.moves != beat.moves or before.beat.phase in LONG
                moved = now if going else before.moved
                self.heard[rank] = Heard(beat, now, moved)
        raised = [
            Named(r, beat.phase, **{**_whereabouts(beat), "phase": None})  # what it did is what it raised
            for r, beat in sorted(beats.items())
            if r != self.rank and beat.phase.startswith(RAISED)
        ]
        if raised:  # its own error ended it (its log has the traceback): the run's error, not a rank lost
            return self.fault_of(ERROR, raised)
        gone = []
        for rank, proc in self.children.items():  # ranks this process started: their exit code is ours
            beat = beats.get(rank)
            if proc.poll() not in (None, 0) and not (beat and is_last_beat(beat)):
                gone.append(
                    Named(
                        rank,
                        exit_in_words(proc.returncode),
                        **(_whereabouts(beat) if beat else {"pid": proc.pid}),
                    )
                )
        for rank, beat in sorted(beats.items()):
            if rank == self.rank or rank in self.children or is_last_beat(beat):
                continue
            if alive(beat, self.machine) is False:
                gone.append(
                    Named(rank, "ended (its exit status is its parent's to read)", **_whereabouts(beat))
                )
        if failed and not gone:
            gone = [
                Named(
                    r,
                    f"no heartbeat for {now - h.heard:.0f} s since a collective failed",
                    **_whereabouts(h.beat),
                )
                for r, h in sorted(self.heard.items())
                if r != self.rank and not is_last_beat(h.beat) and now - h.heard >= self.silent_s
            ]
        if gone:
            return self.fault_of(LOST, gone)
        named = stalled_ranks(self.heard, self.world, now, self.since, self.stall_s, self.silent_s)
        return None if named is None else self.fault_of(STALLED, named)

    def fault_of(self, status: str, named: list[Named]) -> Fault:
        """The fault, its writer the lowest rank still there: not named, not ended, not seen gone."""
        out = {n.rank for n in named}
        for rank, proc in self.children.items():
            if proc.poll() is not None:
                out.add(rank)
        for rank, h in self.heard.items():
            if rank != self.rank and (is_last_beat(h.beat) or alive(h.beat, self.machine) is False):
                out.add(rank)
        writer = min((r for r in range(self.world) if r not in out), default=self.rank)
        return Fault(status, named, writer, self.step)

    def end_run(self, fault: Fault) -> None:
        """End the named ranks here; give the main thread GRACE_S, else write the verdict and exit."""
        log_to_file_only(logging.ERROR, fault.line())
        self.end_named(fault)
        if self.taken.wait(GRACE_S):  # gloo fails the collective at once; NCCL may never: then this thread
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
        """SIGKILL each named rank still running on this machine, but not one ending by its own error."""
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
            log_to_file_only(logging.WARNING, f"rank {named.rank} (pid {beat.beat.pid}) ended with SIGKILL")
            if named.rank in self.children:  # this process started it: its exit is ours to collect
                self.children[named.rank].wait(timeout=5)

    # --- the main thread, once a collective failed ----------------------------------------------------------

    def explain(self, err: BaseException) -> Fault | None:
        """The fault behind `err`, an error the main thread met; None: the error is this rank's own."""
        if self.world == 1:
            return None
        deadline = time.monotonic() + self.silent_s + 2 * self.beat_s
        while True:
            fault = self.fault_now(failed=True)
            if fault is not None or time.monotonic() > deadline:
                break
            time.sleep(self.beat_s / 4)
        if fault is not None:
            self.taken.set()
            self.end_named(fault)
        return fault

    def writes(self, fault: Fault) -> bool:
        """Whether this rank writes the fault's verdict: the writer, unless rank 0 wrote its own error's."""
        own_error = fault.status == ERROR and any(n.rank == 0 for n in fault.named)
        return fault.writer == self.rank and not own_error
