"""Proof of re-seeding (practice P3): `ReseedProof` hashes each overfit step's batch and the random state it
starts from (after the Reseed callback); every hash the same means every step saw the same inputs."""

from __future__ import annotations

import hashlib

import torch

from harness.probes.probe import Probe


def _batch_fingerprint(batch: dict) -> torch.Tensor:
    """Long[]: a 24-bit fingerprint of the batch's tensors, each entry weighed by its position, on their device."""
    total = None
    for key in sorted(batch):
        value = batch[key]
        if not isinstance(value, torch.Tensor):
            continue
        flat = value.detach().reshape(-1)
        flat = flat.float().view(torch.int32).long() if flat.is_floating_point() else flat.long()
        weights = torch.arange(flat.numel(), device=flat.device) % 65521 + 1
        part = (flat * weights).sum() % 16777213
        total = part if total is None else (total * 31 + part) % 16777213
    return torch.zeros((), dtype=torch.long) if total is None else total


def _same_batch(batch: dict, first: dict) -> torch.Tensor:
    """Bool[]: whether `batch` holds what `first` held, key by key, compared on the device (no copy to the host)."""
    same = torch.ones((), dtype=torch.bool)
    if sorted(batch) != sorted(first):
        return ~same
    for key, value in batch.items():
        kept = first[key]
        if not isinstance(value, torch.Tensor) or not isinstance(kept, torch.Tensor):
            same = same & (value == kept if not isinstance(value, torch.Tensor) else False)
        elif (value.dtype, value.shape) != (kept.dtype, kept.shape):
            return ~same
        else:
            same = (value == kept).all() & same.to(value.device)
    return same


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    """torch's CPU random state, and the CUDA device's where training runs on one: tensors on the host."""
    return [torch.get_rng_state(), *([torch.cuda.get_rng_state(device)] if device.type == "cuda" else [])]


def _rng_digest(state: list[torch.Tensor]) -> str:
    """blake2b of a random state (_rng_state)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in state:
        digest.update(part.numpy())
    return digest.hexdigest()


def _digest_number(hexdigest: str) -> float:
    """The first 24 bits of a digest as a float, which every logger keeps exactly."""
    return float(int(hexdigest[:6], 16))


class ReseedProof(Probe):
    """`reseed/` hashes in overfit mode; verdict.json `inputs_identical`."""

    def __init__(self, every: int | None = 1):
        super().__init__(every)
        # the first step's batch (its tensors kept), random state and its digest
        self.first: tuple | None = None
        self.identical = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if not (self.run.overfit and trainer.is_global_zero and self.due(step)):
            return
        rng = _rng_state(pl_module.device)  # on the host
        if self.first is None:
            kept = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            self.first = (kept, rng, _rng_digest(rng))
        # compared as tensors, both on the host; its digest taken once, and again only for a state that differs
        same_rng = len(rng) == len(self.first[1]) and all(map(torch.equal, rng, self.first[1]))
        same = _same_batch(batch, self.first[0])
        # the batch compared and fingerprinted on its device, read with the step's other values
        self.sink.defer(
            step,
            {"batch": _batch_fingerprint(batch), "same": same},
            lambda read: self._read(step, read, self.first[2] if same_rng else _rng_digest(rng), same_rng),
        )

    def _read(self, step: int, read: dict, rng: str, same_rng: bool) -> None:
        same = bool(read["same"]) and same_rng
        self.identical &= same
        metrics = {"reseed/batch_hash": read["batch"], "reseed/rng_hash": _digest_number(rng)}
        self.sink.add(step, {**metrics, "reseed/same_as_first": float(same)})

    def verdict_items(self) -> dict:
        return {"inputs_identical": self.identical if self.run.overfit and self.first is not None else None}
