"""Proof of re-seeding (practice P3): `ReseedProof` hashes each overfit step's batch and the random state it
starts from (after the Reseed callback); every hash the same means every step saw the same inputs."""

from __future__ import annotations

import hashlib

import torch

from harness.probes.probe import Probe


def _batch_digest(batch: dict) -> str:
    """blake2b over the batch's keys and its tensors' dtypes, shapes and bytes (other values by repr)."""
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
    """blake2b of torch's CPU random state, and the CUDA device's where training runs on one."""
    digest = hashlib.blake2b(torch.get_rng_state().numpy(), digest_size=16)
    if device.type == "cuda":
        digest.update(torch.cuda.get_rng_state(device).numpy())
    return digest.hexdigest()


def _digest_number(hexdigest: str) -> float:
    """The first 24 bits of a digest as a float, which every logger keeps exactly."""
    return float(int(hexdigest[:6], 16))


class ReseedProof(Probe):
    """`reseed/` hashes in overfit mode; verdict.json `inputs_identical`."""

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
                "reseed/batch_hash": _digest_number(hashes[0]),
                "reseed/rng_hash": _digest_number(hashes[1]),
                "reseed/same_as_first": float(hashes == self.first),
            },
        )

    def verdict_items(self) -> dict:
        return {"inputs_identical": self.identical if self.run.overfit and self.first is not None else None}
