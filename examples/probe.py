"""A probe a fork might write: the largest logit, the first sign of runaway output scale.

A probe is a Lightning Callback: it logs through whichever loggers the run has (pl_module.log), and
touches the tensors only on the steps it logs, so the other steps cost no host sync."""

from __future__ import annotations

import pytorch_lightning as pl


class LogitScale(pl.Callback):
    """Logs `logit/max_abs`, the largest |logit| of the training batch, every `every` steps."""

    def __init__(self, every: int = 10):
        if every < 1:
            raise ValueError(f"every={every}: steps between two logs must be >= 1 (try 10)")
        self.every = every
        self.largest = None  # a tensor: read on the host once, at the end

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % self.every:
            return  # nothing logged: nothing computed, no sync
        # the training step hands back its logits (detached), so no second forward pass is needed
        largest = outputs["logits"].abs().amax()
        pl_module.log(
            "logit/max_abs", largest, on_step=True, on_epoch=False, batch_size=batch["input_ids"].shape[0]
        )
        self.largest = largest

    def verdict_items(self) -> dict:
        """What this probe adds to verdict.json: the last value it logged."""
        return {"logit_max_abs": None if self.largest is None else float(self.largest)}
