"""Each rank's heartbeat, `<run dir>/.ranks/<rank>.json` (`Beat`): its process, attempt, step, moves and what
its main thread does (`phase_of`), rewritten once a beat; the watchdog reads them."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.report.verdict import write_atomic

#: the run dir's folder of heartbeats, one file a rank
FOLDER = ".ranks"

#: where a main thread's innermost frames are, and the phase that means; the first found, from the innermost
#: frame out, names the phase ("a collective" is followed by the call's name)
PHASES = (
    ("torch/distributed/distributed_c10d.py", "a collective"),
    ("torch/distributed/fsdp/", "a collective"),
    ("torch/utils/data/", "data loading"),
    ("torch/serialization.py", "checkpointing"),
    ("/checkpoint_io", "checkpointing"),
    ("torch/_dynamo/convert_frame.py", "compiling"),
    ("torch/_inductor/", "compiling"),
    ("torch/autograd/__init__.py:backward", "backward"),
    ("torch/autograd/graph.py:_engine_run_backward", "backward"),
    ("torch/_tensor.py:backward", "backward"),
    ("torch/optim/", "the optimizer step"),
)
#: functions (by name) that say which part of the loop the frames above them belong to; the innermost found names
#: it, and failing these a Lightning hook (on_...) names itself
LOOP = {
    "on_save_checkpoint": "checkpointing",
    "save_checkpoint": "checkpointing",
    "validation_step": "validation",
    "_evaluation_step": "validation",
    "training_step": "forward",  # also a forward inside optimizer.step(closure)
    "optimizer_step": "the optimizer step",
    "backward": "backward",
    "advance": "data loading",  # Lightning's loop, between steps and hooks: the next batch is fetched
}
#: the last phases a rank writes: done with training, or out of it by an error of its own
ENDED, RAISED = "ended", "raised"
#: phases in which one operation may last long with no step taken, a rank still beating: not a stall while it beats
LONG = ("checkpointing", "compiling")
#: phases in which a rank waits for the others (DDP all-reduces the gradients inside the backward)
WAITING = ("a collective", "backward")


@dataclass
class Beat:
    """One rank's heartbeat, as written."""

    rank: int
    pid: int
    host: str
    born: int | None  # start_ticks(pid): with `machine`, a reused pid is not taken for this process
    attempt: str  # the job's attempt: a restarted job's ranks do not read the last attempt's files
    machine: str = ""  # this boot and pid namespace (machine_id): where the pid means this process
    step: int = 0
    moves: int = 0  # how often the rank moved on (a training step, a validation batch)
    phase: str = "start-up"
    where: str = ""  # the main thread's innermost frames
    count: int = 0  # beats written: a count that stops is a rank that stopped


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None where it is gone or /proc is not there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in parentheses may hold spaces


def machine_id() -> str:
    """This boot and pid namespace (where a pid means one process); empty where /proc does not say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def is_last_beat(beat: Beat) -> bool:
    """Whether `beat` is the last its rank writes (done, or out by its own error): not waited for."""
    return beat.phase == ENDED or beat.phase.startswith(RAISED)


def alive(beat: Beat, here: str | None = None) -> bool | None:
    """Whether `beat`'s process runs: False once ended, None where this machine cannot tell."""
    here = machine_id() if here is None else here
    if not here or beat.machine != here:
        return None
    try:
        state = Path(f"/proc/{beat.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X") and start_ticks(beat.pid) == beat.born


def phase_of(frame) -> tuple[str, str]:
    """(phase, where) of a thread from its innermost frame `frame` (PHASES, LOOP, a hook)."""
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append((code.co_filename.replace(os.sep, "/"), code.co_name, frame.f_lineno))
        frame = frame.f_back
    where = " < ".join(f"{Path(file).name}:{line} {name}" for file, name, line in frames[:3])
    for file, name, _ in frames:  # the innermost frame that says, whichever table says it
        for marker, phase in PHASES:
            if marker in f"{file}:{name}":
                return (f"{phase} ({name})" if phase == "a collective" else phase), where
        if name in LOOP:
            return LOOP[name], where
        if name.startswith("on_"):
            return f"the hook {name}", where
    return (frames[0][1] if frames else "idle"), where


def main_phase() -> tuple[str, str]:
    """(phase, where) of this process's main thread, read from its stack."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return phase_of(frame)


def _path_of(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / FOLDER / f"{rank}.json"


def write_beat(run_dir: Path, beat: Beat) -> None:
    """Write `beat` whole: a reader never sees half of it."""
    path = _path_of(run_dir, beat.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(asdict(beat)))


def read_beats(run_dir: Path, world: int, attempt: str) -> dict[int, Beat]:
    """The heartbeats of this attempt's ranks 0..world-1; one not written or not readable is left out."""
    beats = {}
    for rank in range(world):
        try:
            beat = Beat(**json.loads(_path_of(run_dir, rank).read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if beat.attempt == attempt:
            beats[rank] = beat
    return beats
