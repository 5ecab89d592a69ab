"""Seeding every generator the harness uses (Python, NumPy, torch CPU and CUDA): `seed_all`; their state as a
checkpoint holds it, comparable (`rng_state`, `set_rng_state`). Code that draws and puts back around itself uses
Lightning's isolate_rng."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def rng_state() -> dict:
    """The state of every generator seed_all seeds, in plain types and tensors (a weights-only checkpoint holds it)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Put back what rng_state() took."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
