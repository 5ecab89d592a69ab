"""`Straggler`: one rank persistently slower than the others outside collectives, the `straggler` symptom named with
rank, host and phase. Each rank writes its phase times beside its heartbeat; global rank 0 reads them: no collective."""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pytorch_lightning as pl

from harness.report.symptoms import Symptom
from harness.report.verdict import write_atomic
from harness.train.distributed.heartbeat import FOLDER
from harness.train.distributed.watchdog import RankWatch
from harness.train.perf.readout import readout_of

log = logging.getLogger(__name__)

#: the phases a training step is timed in by the host's clock, named as the heartbeats name them
PHASES = ("data loading", "forward", "backward", "the optimizer step")
#: those that hold no collective: in the forward (the loss's count, FSDP's gathers) and the backward (the gradients'
#: all-reduce) every rank also waits for the slowest, so its own time there cannot be told from its waiting
OWN = ("data loading", "the optimizer step")


@dataclass(frozen=True)
class Behind:
    """A rank behind the others in a reading: `excess` seconds a step more than their median outside collectives,
    most of it in `phase`, where it spends `spent` seconds a step and the others `others`."""

    rank: int
    phase: str
    excess: float
    spent: float
    others: float


def behind(reading: dict[int, dict[str, float]], min_s: float, fraction: float) -> Behind | None:
    """The rank behind in one reading ({rank: {phase: seconds a step}}): its time in the OWN phases above the other
    ranks' median by `min_s` and by `fraction` of the step's time; None where no rank is."""
    if len(reading) < 2:
        return None
    own = {rank: sum(phases.get(p, 0.0) for p in OWN) for rank, phases in reading.items()}
    slowest = max(own, key=own.get)
    rest = [rank for rank in reading if rank != slowest]
    excess = own[slowest] - median(own[rank] for rank in rest)
    step = median(sum(phases.values()) for phases in reading.values())
    if excess < max(min_s, fraction * step):
        return None
    others = {p: median(reading[rank].get(p, 0.0) for rank in rest) for p in OWN}
    phase = max(OWN, key=lambda p: reading[slowest].get(p, 0.0) - others[p])
    return Behind(slowest, phase, excess, reading[slowest].get(phase, 0.0), others[phase])


def persistent(readings: list[dict], min_s: float, fraction: float, patience: int) -> Behind | None:
    """The rank behind in each of the last `patience` readings, the same one every time (with its smallest excess),
    else None."""
    if len(readings) < patience:
        return None
    seen = [behind(reading, min_s, fraction) for reading in readings[-patience:]]
    if any(b is None for b in seen) or len({b.rank for b in seen}) != 1:
        return None
    return min(seen, key=lambda b: b.excess)


def _pace_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / FOLDER / f"{rank}.pace.json"


class Straggler(pl.Callback):
    """Times each rank's steps by phase (PHASES) and, every `every` steps, writes the medians beside its heartbeat;
    global rank 0 reads every rank's and reports `straggler` for the rank behind (`behind`) in `patience` readings
    in a row. The first reading (warm-up, compiling) is not written."""

    def __init__(
        self, run_dir, every: int = 10, patience: int = 3, min_ms: float = 10.0, fraction: float = 0.2
    ):
        self.run_dir, self.every, self.patience = Path(run_dir), every, patience
        self.min_s, self.fraction = min_ms / 1000, fraction
        self.on, self.rank, self.world, self.attempt, self.host = False, 0, 1, "", ""
        self.times: dict[str, list[float]] = {p: [] for p in PHASES}
        self.mark: float | None = None  # when the latest phase began
        self.batches, self.readings, self.judged = 0, {}, -1
        self.reported: set[int] = set()

    def on_train_start(self, trainer, pl_module) -> None:
        self.on, self.rank, self.world = trainer.world_size > 1, trainer.global_rank, trainer.world_size
        # the watchdog's id of this attempt: a restarted job does not read the readings its last attempt left
        self.attempt = next((c.attempt for c in trainer.callbacks if isinstance(c, RankWatch)), "")
        self.host = socket.gethostname()

    def lap(self, phase: str | None) -> None:
        """The phase that began at `mark` ends now (None: nothing was being timed)."""
        now = time.perf_counter()
        if phase is not None and self.mark is not None:
            self.times[phase].append(now - self.mark)
        self.mark = now

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.on:
            self.lap("data loading")  # since the last batch ended: the next batch, and the loop's own work

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self.on:
            self.lap("forward")

    def on_after_backward(self, trainer, pl_module) -> None:
        if self.on:
            self.lap("backward")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.on:
            return
        self.lap("the optimizer step")
        self.batches += 1
        if self.batches % self.every == 0:
            self.publish(trainer, self.batches // self.every - 1)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.mark = None  # validation's time is no phase of a step

    def on_train_end(self, trainer, pl_module) -> None:
        if self.on and self.rank == 0:
            self.judge(trainer)

    def publish(self, trainer, block: int) -> None:
        """Write this rank's reading `block` (the median of each phase over its steps); rank 0 then judges."""
        times, self.times = self.times, {p: [] for p in PHASES}
        if block > 0:  # the first block's steps compile and warm up
            phases = {p: median(values) for p, values in times.items() if values}
            self.readings[block] = {"step": trainer.global_step, "phases": phases}
            self.readings = {b: r for b, r in self.readings.items() if b > block - self.patience - 2}
            pace = {"rank": self.rank, "host": self.host, "attempt": self.attempt, "readings": self.readings}
            try:
                _pace_path(self.run_dir, self.rank).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(_pace_path(self.run_dir, self.rank), json.dumps(pace))
            except OSError as err:  # a full disk: this rank's pace goes unread, which costs only this symptom
                log.debug("pace not written: %s", err)
        if self.rank == 0:
            self.judge(trainer)

    def read_paces(self) -> dict[int, dict]:
        """Every rank's latest readings of this attempt, by rank; a rank not yet written is left out."""
        paces = {}
        for rank in range(self.world):
            try:
                pace = json.loads(_pace_path(self.run_dir, rank).read_text())
            except (OSError, ValueError):
                continue
            if pace.get("attempt") == self.attempt:
                pace["readings"] = {int(b): r for b, r in pace["readings"].items()}
                paces[rank] = pace
        return paces

    def judge(self, trainer) -> None:
        """On global rank 0: the readings every rank has written, judged once each new one is in."""
        paces = self.read_paces()
        if len(paces) < self.world:
            return
        common = sorted(set.intersection(*(set(p["readings"]) for p in paces.values())))
        if not common or common[-1] <= self.judged:
            return
        self.judged = common[-1]
        readings = [{rank: p["readings"][b]["phases"] for rank, p in paces.items()} for b in common]
        found = persistent(readings, self.min_s, self.fraction, self.patience)
        if found is None or found.rank in self.reported:
            return
        self.reported.add(found.rank)
        steps = [paces[0]["readings"][b]["step"] for b in common[-self.patience :]]
        first = max(steps[0] - self.every, 0)
        host = paces[found.rank]["host"]
        detail = (
            f"rank {found.rank} on {host} takes {found.excess * 1e3:.1f} ms a step more than the others outside "
            f"collectives, in {found.phase} ({found.spent * 1e3:.1f} ms a step against {found.others * 1e3:.1f} ms), "
            f"in each of {self.patience} readings of {self.every} steps (steps {first}-{steps[-1]}); the other ranks "
            "wait for it at every collective"
        )
        symptom = Symptom("straggler", first, f"rank {found.rank} ({host})", found.excess * 1e3, detail)
        readout = readout_of(trainer)
        if readout is not None:
            readout.report(symptom)
        else:
            log.warning("%s", symptom.line())
