"""The watchdog's parts on their own, in one process: the judgement over heartbeats, the phase read from a real
thread's stack, whether a process still runs, the thread naming a real process stopped or killed, and Lightning's
observer stood down. Whole runs of two processes with a rank killed or stopped: tests/scale/test_rank_faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from harness import compat
from harness.errors import ConfigError
from harness.report.run_page import next_step
from harness.report.verdict import exit_code
from harness.train.distributed.heartbeat import (
    Beat,
    alive,
    machine_id,
    phase_of,
    read_beats,
    start_ticks,
    write_beat,
)
from harness.train.distributed.watchdog import (
    LOST,
    STALLED,
    Fault,
    Heard,
    Named,
    RankWatch,
    exit_in_words,
    stalled_ranks,
)


def heard(rank: int, step: int, phase: str, heard_at: float, moved_at: float) -> Heard:
    beat = Beat(rank, 100 + rank, "here", 1, "a", step=step, moves=step, phase=phase)
    return Heard(beat, heard_at, moved_at)


# --- the judgement: pure, on what a rank has heard ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("ranks", "named", "why"),
    [
        # moved 2 s ago: not a stall, whatever the phases
        ([(0, 5, "backward", 99, 98), (1, 5, "data loading", 99, 98)], None, None),
        # no move for 10 s, rank 1 silent for 10 s (stopped, dead, frozen in C): named
        ([(0, 5, "backward", 99, 90), (1, 4, "forward", 90, 90)], [1], "no heartbeat for 10 s"),
        # all beating; rank 1 blocked in its data while rank 0 waits in a collective: rank 1 is behind
        ([(0, 5, "a collective (all_reduce)", 99, 90), (1, 5, "data loading", 99, 90)], [1], "behind"),
        # a lower step than the others: behind, whatever its phase
        ([(0, 6, "backward", 99, 90), (1, 5, "backward", 99, 90), (2, 6, "backward", 99, 90)], [1], "behind"),
        # all waiting in collectives at one step: they called different ones, all named
        (
            [(0, 5, "a collective (barrier)", 99, 90), (1, 5, "a collective (all_reduce)", 99, 90)],
            [0, 1],
            "no other",
        ),
        # one long operation, still beating: not a stall (the process group's timeout bounds it)
        ([(0, 5, "checkpointing", 99, 90), (1, 5, "a collective (barrier)", 99, 90)], None, None),
        ([(0, 0, "compiling", 99, 90), (1, 0, "backward", 99, 90)], None, None),
        # nobody waits for anybody: not a stall between ranks
        ([(0, 5, "data loading", 99, 90), (1, 5, "data loading", 99, 90)], None, None),
        # a rank that ended is not waited for, nor silent
        ([(0, 5, "ended", 80, 80), (1, 5, "data loading", 99, 90)], None, None),
    ],
)
def test_a_stall_names_the_ranks_that_did_not_arrive(ranks, named, why):
    seen = {r: heard(r, step, phase, h, m) for r, step, phase, h, m in ranks}
    found = stalled_ranks(seen, len(ranks), now=100.0, since=0.0, stall_s=5.0, silent_s=3.0)
    assert (None if found is None else [n.rank for n in found]) == named
    if found is not None:
        assert all(why in n.what for n in found), found
        assert all(n.step is not None and n.phase for n in found)  # where it was, to say so


def test_a_rank_never_heard_from_is_named_once_the_run_has_stalled():
    seen = {0: heard(0, 0, "a collective (broadcast)", 99, 0)}
    assert stalled_ranks(seen, 2, now=4.0, since=0.0, stall_s=5.0, silent_s=3.0) is None
    (lost,) = stalled_ranks(seen, 2, now=6.0, since=0.0, stall_s=5.0, silent_s=3.0)
    assert lost.rank == 1 and "never reported" in lost.what


def test_exits_in_words_and_exit_codes():
    assert (
        exit_in_words(-9) == "killed by SIGKILL"
        and exit_in_words(1) == "exited with 1"
        and exit_in_words(-99) == "killed by signal 99"
    )
    assert exit_code({"status": LOST}) == 6 and exit_code({"status": STALLED}) == 7


# --- the phase, read from a real thread's stack ------------------------------------------------------------------


def blocked_phase(work) -> str:
    """The phase of a thread running `work(release)`, read while it is blocked (until release is set)."""
    release, inside = threading.Event(), threading.Event()

    def run():
        work(release, inside)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert inside.wait(10)
    try:
        return phase_of(sys._current_frames()[thread.ident])[0]
    finally:
        release.set()
        thread.join(10)


def test_the_phase_is_what_the_stack_is_doing():
    class Stuck(torch.utils.data.Dataset):  # a read from a stuck filesystem
        def __init__(self, release, inside):
            self.release, self.inside = release, inside

        def __len__(self):
            return 1

        def __getitem__(self, i):
            self.inside.set()
            self.release.wait()
            return torch.zeros(1)

    def loading(release, inside):
        next(iter(torch.utils.data.DataLoader(Stuck(release, inside))))

    class Wait(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            ctx.inside.set()
            ctx.release.wait()
            return grad

    def backward(release, inside):
        x = torch.ones(1, requires_grad=True)

        class Bound(Wait):
            @staticmethod
            def forward(ctx, x):
                ctx.release, ctx.inside = release, inside
                return x * 1

        Bound.apply(x).sum().backward()

    def stepping(release, inside):
        param = torch.nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([param], lr=0.1)

        def closure():
            inside.set()
            release.wait()
            return torch.zeros(())

        optimizer.step(closure)

    class Blocking:  # a checkpoint written to a filesystem that stopped answering
        def __init__(self, release, inside):
            self.release, self.inside = release, inside

        def write(self, data):
            self.inside.set()
            self.release.wait()
            return len(data)

        def flush(self):
            return None

    def saving(release, inside):
        torch.save({"w": torch.ones(3)}, Blocking(release, inside))

    def on_train_batch_start(release, inside):  # a hook that never returns
        inside.set()
        release.wait()

    def forward_in_a_closure(release, inside):  # automatic optimization: the forward runs in optimizer.step
        param = torch.nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([param], lr=0.1)

        def training_step():
            inside.set()
            release.wait()
            return (param * 2).sum()

        optimizer.step(training_step)

    assert blocked_phase(loading) == "data loading"
    assert blocked_phase(backward) == "backward"
    assert blocked_phase(stepping) == "the optimizer step"
    assert blocked_phase(saving) == "checkpointing"
    assert blocked_phase(on_train_batch_start) == "the hook on_train_batch_start"
    assert blocked_phase(forward_in_a_closure) == "forward"


# --- processes: alive or not, named by the watchdog's thread -----------------------------------------------------


def test_a_process_is_alive_until_it_ends_and_a_reused_pid_is_not_it():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = machine_id()
        beat = Beat(0, process.pid, "here", start_ticks(process.pid), "a", here)
        assert here and alive(beat) is True
        assert (
            alive(Beat(0, process.pid, "here", beat.born + 1, "a", here)) is False
        )  # another process, same pid
        assert alive(Beat(0, process.pid, "here", beat.born, "a", "elsewhere")) is None  # not ours to tell
    finally:
        process.kill()
        process.wait()
    assert alive(beat) is False


#: a stand-in rank: beats (and moves) every 0.1 s as rank 1 of attempt "t" in the run dir argv[1]
BEATING = """
import os, sys, time
from harness.train.distributed.heartbeat import Beat, start_ticks, machine_id, write_beat
for count in range(1, 100000):
    beat = Beat(1, os.getpid(), "here", start_ticks(os.getpid()), "t", machine_id(), step=count, moves=count, count=count)
    beat.phase = "forward"
    write_beat(sys.argv[1], beat)
    time.sleep(0.1)
"""


def watching(run_dir: Path) -> RankWatch:
    """Rank 0's watchdog of a 2-rank run, started by hand (no Trainer): its main thread is this test's, which
    takes over any fault (so the thread names it and ends the rank, and does not end this process)."""
    watch = RankWatch(run_dir, stall_s=1.0, beat_s=0.1, silent_s=0.5, on_fault=lambda fault: 99)
    watch.world, watch.attempt, watch.machine = 2, "t", machine_id()
    watch.since = time.monotonic()
    watch.taken.set()
    return watch


def test_the_watchdog_names_a_stopped_rank_and_ends_it(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", BEATING, str(tmp_path)])
    try:
        deadline = time.monotonic() + 30
        while not read_beats(tmp_path, 2, "t") and time.monotonic() < deadline:
            time.sleep(0.05)
        watch = watching(tmp_path)
        watch.thread = threading.Thread(target=watch.run, daemon=True)
        watch.thread.start()
        time.sleep(1.5)
        assert watch.fault is None, watch.fault  # it moves: no stall, though rank 0 (this test) never steps
        rank.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        watch.thread.join(timeout=10)
        assert watch.fault is not None and time.monotonic() - stopped < 5
        (named,) = watch.fault.named
        assert watch.fault.status == STALLED and named.rank == 1 and "no heartbeat" in named.what
        assert watch.fault.writer == 0 and named.pid == rank.pid and named.phase == "forward"
        assert rank.wait(timeout=10) == -signal.SIGKILL  # ended: a stopped process obeys SIGKILL
    finally:
        rank.kill()
        rank.wait()


def test_a_rank_this_process_started_is_named_with_its_signal_at_once(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", BEATING, str(tmp_path)])
    try:
        watch = watching(tmp_path)
        watch.children = {1: rank}
        assert watch.explain(RuntimeError("a bug of the run's own")) is None  # every rank runs: not a fault
        rank.kill()
        rank.wait()
        fault = watch.explain(RuntimeError("Connection reset by peer"))
        assert fault.status == LOST and [(n.rank, n.what) for n in fault.named] == [(1, "killed by SIGKILL")]
        assert "rank 1" in fault.line() and "killed by SIGKILL" in fault.line()
    finally:
        rank.kill()
        rank.wait()


def test_lightnings_observer_stands_down(tmp_path):
    """Lightning's observer SIGKILLs its main process within its period of a child's death; stood down, it
    does not (its main process here is a stand-in, not this test)."""
    from lightning_fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        observer = _ChildProcessObserver(main_pid=stand_in.pid, child_processes=[child], sleep_period=0.05)
        observer.start()
        assert compat.stand_down_child_observer() == [child]
        child.kill()
        child.wait()
        observer.join(timeout=5)
        assert not observer.is_alive() and stand_in.poll() is None
    finally:
        for process in (stand_in, child):
            process.kill()
            process.wait()


# --- the config and the page --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["watchdog.silent_s=1", "watchdog.beat_s=1"], "watchdog.silent_s"),
        (["watchdog.stall_s=5", "watchdog.silent_s=10"], "watchdog.stall_s"),
        (["watchdog.beat_s=0"], "watchdog.beat_s"),
    ],
)
def test_watchdog_settings_that_cannot_work_are_refused(overrides, key, make_config):
    from harness.tasks.validate import validate

    with pytest.raises(ConfigError) as refused:
        validate(make_config(*overrides))
    assert str(refused.value).startswith(f"{key}="), refused.value


def test_the_page_says_how_to_resume_a_run_a_rank_ended(tmp_path):
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    then = next_step({"status": STALLED, "checkpoint": str(ckpt)}, tmp_path, ["trainer=ddp", "mode=full"])
    assert then == f"Resume from the checkpoint: `python train.py trainer=ddp mode=full ckpt_path={ckpt}`."


def test_a_heartbeat_of_another_attempt_is_not_read(tmp_path):
    write_beat(tmp_path, Beat(0, 1, "here", 1, "old"))
    write_beat(tmp_path, Beat(1, 2, "here", 1, "new"))
    assert list(read_beats(tmp_path, 2, "new")) == [1]
    (tmp_path / ".ranks" / "0.json").write_text("{not json")
    assert list(read_beats(tmp_path, 2, "old")) == []


def test_a_rank_on_another_machine_is_lost_once_silent_after_a_collective_failed(tmp_path):
    """Its process cannot be seen from here: silent for silent_s once a collective with it failed, it is lost."""
    write_beat(
        tmp_path, Beat(1, 4242, "another-machine", 1, "t", "elsewhere", step=7, phase="backward", count=3)
    )
    watch = watching(tmp_path)
    started = time.monotonic()
    fault = watch.explain(RuntimeError("Connection closed by peer"))
    assert fault is not None and time.monotonic() - started >= 0.5
    (named,) = fault.named
    assert fault.status == LOST and named.rank == 1 and named.host == "another-machine"
    assert "no heartbeat" in named.what and named.step == 7 and named.phase == "backward"


def test_a_ranks_own_error_is_named_as_an_error_and_written_by_the_lowest_rank_left(tmp_path):
    """Rank 2 raised an error of its own; rank 1 has ended (done) and rank 0, the watcher, is there: the fault is
    ERROR naming rank 2, and rank 0 writes it. Had rank 0 raised, its own verdict would stand: nobody else writes."""
    here = machine_id()
    write_beat(tmp_path, Beat(1, 4241, "here", 1, "t", here, phase="ended", count=9))
    write_beat(tmp_path, Beat(2, 4242, "here", 1, "t", here, phase="raised ValueError('x')", count=9))
    watch = watching(tmp_path)
    watch.world = 3
    fault = watch.explain(RuntimeError("Connection reset by peer"))
    assert (
        fault.status == "ERROR"
        and [n.rank for n in fault.named] == [2]
        and "ValueError" in fault.named[0].what
    )
    assert fault.writer == 0 and watch.writes(fault)
    other = watching(tmp_path)
    other.rank = 1
    assert not other.writes(Fault("ERROR", [Named(0, "raised ValueError('y')")], 1, 3))


def test_the_stall_clock_starts_where_a_long_operation_ends_not_where_it_began(tmp_path):
    """Rank 0 checkpoints for 5 s (stall_s is 1) while rank 1 waits in a barrier; the moment rank 0 joins the
    barrier too, both wait in a collective with no step taken for 5 s: not a stall, the barrier is about to pass."""
    here, watch = machine_id(), watching(tmp_path)
    pids = (os.getpid(), os.getppid())  # alive processes of this machine: neither is taken for gone
    born = [start_ticks(p) for p in pids]

    def beats(at: float, count: int, phase0: str) -> Fault | None:
        for rank, phase in ((0, phase0), (1, "a collective (barrier)")):
            write_beat(
                tmp_path, Beat(rank, pids[rank], "here", born[rank], "t", here, 3, 7, phase, count=count)
            )
        return watch.read_fault(at)

    start = time.monotonic()
    assert all(beats(start + s, s + 1, "checkpointing") is None for s in range(6))
    assert beats(start + 6, 7, "a collective (barrier)") is None
    fault = beats(start + 7.5, 8, "a collective (barrier)")  # still there stall_s after: a stall
    assert fault is not None and "waits in a collective" in fault.named[0].what, fault
