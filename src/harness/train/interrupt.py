"""A signal during training: `StopOnSignal` lets the step in progress finish and be checkpointed, then stops
the run with an INTERRUPTED verdict; a second signal stops it at once. Other moments: harness.signals."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytorch_lightning as pl

from harness.signals import Interrupted, SignalGate, gate_of

log = logging.getLogger(__name__)


class StopOnSignal(SignalGate, pl.Callback):
    """A signal finishes the step, checkpoints, then raises Interrupted; a second one raises at once."""

    def __init__(self, checkpoint: Path):
        SignalGate.__init__(self)
        self.checkpoint = checkpoint
        #: what the job is doing, for the line that says where a signal stopped it
        self.phase = "start-up"

    def hand_on(self) -> None:
        """After the stopped run saved its checkpoint and verdict: pass the signal on to the handler before
        ours."""
        if self.received is None:
            return
        # under the submitit launcher it is submitit's, which requeues the job into the same run dir
        handler = signal.getsignal(self.received)
        if not callable(handler) or handler is signal.default_int_handler or gate_of(handler) is not None:
            return
        log.info(
            "%s: handed on to %s",
            signal.Signals(self.received).name,
            getattr(handler, "__qualname__", handler),
        )
        try:
            handler(self.received, None)
        except Exception as err:  # submitit's "not requeued" (e.g. timed out too often): the verdict stands
            log.warning("not requeued: %s", err)

    def on_train_start(self, trainer, pl_module) -> None:
        # Lightning put its own SIGTERM handler in front of ours when fit began; a signal landing between our
        # on_train_batch_end and its own check would end the run by SystemExit: exit 0, no checkpoint, no
        # verdict. Ours alone decides (Lightning restores the handlers it found when fit ends).
        self.install()
        self.phase, self.deferring = "training", True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.stop_if_signalled(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.phase == "training":
            self.phase = "validation"

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        # a validation pass inside training may be long: a signal stops it at the next batch, with the step's
        # checkpoint (harness.train.checkpoints.ResumeState: the resumed run runs this validation again)
        if self.phase == "validation":
            self.stop_if_signalled(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.phase == "validation":
            self.phase = "training"

    def stop_if_signalled(self, trainer) -> None:
        signum = self.received
        if trainer.world_size > 1:  # every rank stops at the same step, or one waits in an all-reduce forever
            if not trainer.strategy.reduce_boolean_decision(signum is not None, all=False):
                return
            signum = signum or signal.SIGTERM  # a rank the signal did not reach stops as if it had
        elif signum is None:
            return
        self.stop(trainer, signum)

    def on_train_end(self, trainer, pl_module) -> None:
        # past the last step: a signal from now on stops at once, and one that came after the last step's end
        # (during the last validation) stops the run here, its final weights saved as after any step
        self.phase, self.deferring = "the end of training", False
        if self.received is not None:
            self.stop(trainer, self.received)

    def stop(self, trainer, signum: int) -> None:
        # saved where ModelCheckpoint saves, so it resumes exactly like a periodic checkpoint
        trainer.save_checkpoint(self.checkpoint)
        raise Interrupted(signum)
