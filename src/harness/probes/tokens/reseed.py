"""Proof of re-seeding (practice P3): in overfit mode, a hash of each step's batch and of the random state the
step starts from (right after the Reseed callback, which comes before the probes in the callback list).
If every step saw the same inputs and the same random numbers, every hash is the same."""

from __future__ import annotations

import hashlib

import torch

from harness.probes.probe import Probe


def _batch_digest(batch: dict) -> str:
    """blake2b over the batch's keys, and its tensors' dtypes, shapes and bytes (other values by repr)."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(batch):
        value = batch[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
            digest.update(value.detach().cpu().contiguous().numpy())  # the buffer itself: no copy
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def _rng_digest(device: torch.device) -> str:
    """blake2b of torch's CPU random state, and of the CUDA device's when training runs on one."""
    digest = hashlib.blake2b(torch.get_rng_state().numpy(), digest_size=16)
    if device.type == "cuda":
        digest.update(torch.cuda.get_rng_state(device).numpy())
    return digest.hexdigest()


def short(hexdigest: str) -> float:
    """The first 24 bits of a digest as a number every logger keeps exactly (float32 holds 24 bits)."""
    return float(int(hexdigest[:6], 16))


class ReseedProof(Probe):
    """Logs `reseed/batch_hash`, `reseed/rng_hash` and `reseed/same_as_first` (1 or 0) every `every` steps in
    overfit mode (only it re-seeds). verdict.json: `inputs_identical`, true when every hashed step matched the
    first, null in mode=full."""

    def __init__(self, every: int | None = 1):
        super().__init__(every)
        self.first: tuple[str, str] | None = None
        self.identical = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if not (self.run.overfit and trainer.is_global_zero and self.due(step)):
            return
        # the host copy this step's logging costs
        hashes = (_batch_digest(batch), _rng_digest(pl_module.device))
        self.first = self.first or hashes
        self.identical &= hashes == self.first
        self.sink.add(
            step,
            {
                "reseed/batch_hash": short(hashes[0]),
                "reseed/rng_hash": short(hashes[1]),
                "reseed/same_as_first": float(hashes == self.first),
            },
        )

    def verdict_items(self) -> dict:
        return {"inputs_identical": self.identical if self.run.overfit and self.first is not None else None}
