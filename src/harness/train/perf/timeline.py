"""Where a step's time goes, without a device sync: `Timeline` marks where each phase starts (the host clock on a
CPU; a CUDA event on a GPU, read once the step's copy to the host has passed it), `Wrapped` times other objects'
hooks as a phase, `FetchClock` the training loader's fetches."""

from __future__ import annotations

import contextlib
import inspect
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.profilers import Profiler

#: the phases of a step: the loader's fetch, the training step's forward and backward, the optimizer (clipping
#: included), the harness's own probes and checks, validation, checkpoints, and the rest (Lightning's loop,
#: logging, the readout's copy); then the fit's time before its first step (`setup`: Lightning's set-up, the FLOP
#: count, the model summary), which only the first window holds, and after its last (`finish`: the callbacks' end of
#: training, the probes' figures), which no window holds: both are in the loop's whole (`Timeline.total`)
PHASES = (
    "data_wait",
    "forward_backward",
    "optimizer",
    "harness",
    "validation",
    "checkpoint",
    "other",
    "setup",
    "finish",
)
#: the callback hooks a Wrapped times, where the callback has its own
STEP_HOOKS = (
    "on_fit_start",
    "on_train_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
)
#: what Lightning's training loop calls each fetch of a batch when it tells its profiler
FETCH = "train_dataloader_next"


class Timeline:
    """The phase running now, the seconds each phase took in the window last closed (`close`, `window`), and in
    all windows together (`total`, whole once `finish` has read the last)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.phase = "setup"  # until the first step
        self.spent = dict.fromkeys(PHASES, 0.0)  # CPU: this window's seconds so far
        self.closed = dict.fromkeys(PHASES, 0.0)  # CPU: the window last closed
        self.total = dict.fromkeys(PHASES, 0.0)  # every window read so far
        self.last = time.perf_counter()
        self.marks: list[tuple[str, torch.cuda.Event]] = []  # GPU: (the phase it starts, its event), in order
        self.end = 0  # GPU: the index in marks of the window's last mark
        self.pool: list[torch.cuda.Event] = []  # GPU: events read already, to record again
        if self.cuda:
            self.switch("setup")

    def switch(self, phase: str) -> str:
        """Start `phase` now; returns the phase it ends."""
        ended = self.phase
        if self.cuda:
            event = self.pool.pop() if self.pool else torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((phase, event))
        else:
            now = time.perf_counter()
            self.spent[ended] += now - self.last
            self.last = now
        self.phase = phase
        return ended

    def close(self) -> None:
        """End the window at the latest mark (a logging step's end)."""
        if self.cuda:
            self.end = len(self.marks) - 1
        else:
            self.closed, self.spent = self.spent, dict.fromkeys(PHASES, 0.0)
            self.total = {phase: self.total[phase] + spent for phase, spent in self.closed.items()}

    def window(self) -> dict[str, float]:
        """Seconds each phase took in the window last closed. On a GPU its events are read, so call it after the
        step's copy to the host, which every one of them precedes; one not yet passed is left for the next."""
        if not self.cuda:
            return self.closed
        spent = dict.fromkeys(PHASES, 0.0)
        read = 0
        for (phase, start), (_, stop) in zip(
            self.marks[: self.end], self.marks[1 : self.end + 1], strict=True
        ):
            if not stop.query():
                break
            spent[phase] += start.elapsed_time(stop) / 1e3
            read += 1
        self.pool += [event for _, event in self.marks[:read]]
        self.marks, self.end = self.marks[read:], self.end - read
        self.total = {phase: self.total[phase] + seconds for phase, seconds in spent.items()}
        return spent

    def finish(self) -> dict[str, float]:
        """Close the last window at once and return the seconds each phase took since the timeline began (on a GPU
        the device is waited for: the run's steps are over)."""
        self.switch(self.phase)
        self.close()
        if self.cuda:
            try:
                torch.cuda.synchronize()
            except RuntimeError:  # a device that failed: the fit raises it itself; the windows read stand
                return dict(self.total)
            self.window()
        return dict(self.total)


def _own(target, name: str) -> bool:
    """Whether `target` has a hook `name` of its own (set on it, or from a class other than pl.Callback)."""
    if name in vars(target):
        return True
    mine = inspect.getattr_static(type(target), name, None)
    return mine is not None and mine is not inspect.getattr_static(pl.Callback, name, None)


class Wrapped:
    """Methods of other objects replaced by ones that time them as a phase of the timeline, until `restore`."""

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.replaced: list[
            tuple[object, str, object]
        ] = []  # (object, name, what its instance held, or None)

    def hooks(self, callback: pl.Callback, phase: str) -> None:
        """Time each hook of STEP_HOOKS `callback` has of its own as `phase`."""
        for name in STEP_HOOKS:
            if _own(callback, name):
                self.method(callback, name, phase)

    def method(self, target, name: str, phase: str) -> None:
        """Time `target.name(...)` as `phase`."""
        inner, timeline = getattr(target, name), self.timeline

        def timed(*args, **kwargs):
            ended = timeline.switch(phase)
            try:
                return inner(*args, **kwargs)
            finally:
                timeline.switch(ended)

        self.replaced.append((target, name, vars(target).get(name)))
        setattr(target, name, timed)

    def restore(self) -> None:
        """Put every method back as it was."""
        for target, name, held in reversed(self.replaced):
            if held is None:
                vars(target).pop(name, None)
            else:
                setattr(target, name, held)
        self.replaced = []


class FetchClock:
    """Times the training loader's fetches as data_wait: Lightning tells its profiler of each
    (`[_TrainingEpochLoop].train_dataloader_next`), its start and stop calls timed here; `seen` counts them."""

    def __init__(self, timeline: Timeline, profiler):
        self.timeline, self.profiler, self.seen = timeline, profiler, 0
        self.ended = "other"
        start, stop = profiler.start, profiler.stop

        def timed_start(action: str) -> None:
            if action.endswith(FETCH):
                self.ended = timeline.switch("data_wait")
                self.seen += 1
            start(action)

        def timed_stop(action: str) -> None:
            stop(action)
            if action.endswith(FETCH):
                timeline.switch(self.ended)

        @contextlib.contextmanager
        def profile(action: str):  # Profiler.profile, calling the profiler's own start and stop
            try:
                start(action)
                yield action
            finally:
                stop(action)

        # every hook Lightning calls goes through profile (~90 a step): it skips the timed start and stop, which
        # only the fetches, called on their own, pass through
        if inspect.getattr_static(type(profiler), "profile", None) is inspect.getattr_static(
            Profiler, "profile"
        ):
            profiler.profile = profile
        profiler.start, profiler.stop = timed_start, timed_stop

    def detach(self) -> None:
        """The profiler's own start, stop and profile back."""
        for name in ("start", "stop", "profile"):
            vars(self.profiler).pop(name, None)
