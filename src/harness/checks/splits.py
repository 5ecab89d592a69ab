"""Training and validation hold different examples: a validation set that is (part of) the training set measures
memorization, and every curve read from it lies.

Judged on a bounded sample of each split (harness.checks.reads.DataReads.items): whole examples by hash, and
for long examples their stretches of SHINGLE tokens, so that validation windows cut from the training text at
other offsets are found too. Data whose examples repeat anyway (a tiny vocabulary at a tiny length) repeats
within training as often as across the splits: the overlap counts only beyond that."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from harness.batches import collate_of
from harness.checks.base import FAIL, PASS, SKIP, CheckResult
from harness.checks.batch import layout_fault
from harness.checks.reads import reads

#: validation items hashed at most
VAL_ITEMS = 1024
#: an overlap this large (a share of the validation examples read: real text repeats some passages, the built-in
#: corpus 11% of its 17-character chunks), and this far above the training set's own
#: repeats, fails
OVERLAP, MARGIN = 0.3, 0.05
#: examples this long are also compared by stretches of SHINGLE tokens; a validation example counts as found in
#: training when COVERED of its positions lie in stretches the training sample holds
LONG, SHINGLE, COVERED = 64, 32, 0.9


def alone(item, collate) -> dict | None:
    """An item collated on its own by its loader's collate (a Batch of one, without padding), or None where that
    is not a Batch."""
    try:
        batch = collate([item])
    except Exception:  # an item its own collate refuses alone: nothing to compare
        return None
    if layout_fault(batch) is not None or batch["input_ids"].shape[0] != 1:
        return None
    return {k: batch[k][0] for k in ("input_ids", "targets", "loss_mask")}


def tokens(row: dict) -> np.ndarray:
    """An example's token ids as int64: its inputs, then its last target (a language-modelling window whole)."""
    return torch.cat([row["input_ids"], row["targets"][-1:]]).numpy().astype(np.int64)


def key(row: dict) -> bytes:
    """What makes an example the example it is: its inputs and the targets the loss sees."""
    labels = row["targets"][row["loss_mask"]].numpy().astype(np.int64).tobytes()
    return row["input_ids"].numpy().astype(np.int64).tobytes() + b"|" + labels


def shingles(ids: np.ndarray, size: int) -> np.ndarray:
    """A 64-bit hash of every stretch of `size` consecutive ids (uint64[len(ids) - size + 1])."""
    windows = np.lib.stride_tricks.sliding_window_view(ids.astype(np.uint64), size)
    powers = np.uint64(1_000_003) ** np.arange(size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (windows * powers).sum(axis=1, dtype=np.uint64)


def covered(ids: np.ndarray, known: np.ndarray, size: int) -> float:
    """The share of `ids`' positions inside a stretch of `size` whose hash is in `known` (sorted)."""
    hashes = shingles(ids, size)
    where = np.minimum(np.searchsorted(known, hashes), len(known) - 1)
    hit = known[where] == hashes
    inside = np.zeros(len(ids), dtype=bool)
    for start in np.flatnonzero(hit):
        inside[start : start + size] = True
    return float(inside.mean())


def found_stretches(train: list[np.ndarray], val: list[np.ndarray]) -> tuple[int, int]:
    """(validation examples of LONG+ ids with COVERED of their positions in training's stretches, such examples)."""
    longs = [ids for ids in val if len(ids) >= LONG]
    known = [shingles(ids, SHINGLE) for ids in train if len(ids) >= SHINGLE]
    if not longs or not known:
        return 0, 0
    known = np.unique(np.concatenate(known))
    return sum(covered(ids, known, SHINGLE) >= COVERED for ids in longs), len(longs)


def split_overlap(model, data, cfg=None) -> CheckResult:
    """No validation example is a training example: whole examples by hash, long ones also by their stretches,
    beyond what the training set repeats of itself. The overlap is reported as a share of the validation read."""
    data = reads(data, cfg)
    train_set, val_set = data.dataset("train"), data.dataset("val")
    if train_set is not None and train_set is val_set:
        return CheckResult(
            "split_overlap",
            FAIL,
            "val_dataset is train_dataset itself: validation measures memorization; hold examples out for it",
        )
    items, share = data.items("train")
    train = [r for r in (alone(i, collate_of(data.loader("train"))) for i in items) if r is not None]
    items, _ = data.items("val", limit=VAL_ITEMS)
    val = [r for r in (alone(i, collate_of(data.loader("val"))) for i in items) if r is not None]
    if not train or not val:
        return CheckResult("split_overlap", SKIP, "not judged: no example of both splits could be read")
    train_keys, val_keys = Counter(map(key, train)), list(map(key, val))
    hits = sum(k in train_keys for k in val_keys)
    repeats = sum(c for c in train_keys.values() if c > 1) / len(train)
    found, longs = found_stretches(list(map(tokens, train)), list(map(tokens, val)))
    overlap, stretched = hits / len(val_keys), found / longs if longs else 0.0
    sample = f"{len(val)} validation and {len(train)} training examples read" + (
        f" ({share:.0%} of the training set)" if 0 < share < 1 else ""
    )
    if hits >= min(3, len(val_keys)) and overlap >= OVERLAP and overlap > 2 * repeats + MARGIN:
        return CheckResult(
            "split_overlap",
            FAIL,
            f"{hits} of the validation examples ({overlap:.0%}) are training examples too ({sample}; training repeats "
            f"{repeats:.0%} of itself): validation then measures memorization; split the examples once and keep the "
            "validation ones out of training",
        )
    if found >= min(3, longs) and stretched >= OVERLAP and stretched > 2 * repeats + MARGIN:
        return CheckResult(
            "split_overlap",
            FAIL,
            f"{found} of {longs} long validation examples ({stretched:.0%}) lie inside training text: nearly all of "
            f"their {SHINGLE}-token stretches occur in training ({sample}); the validation text is cut from the "
            "training range: take it from a range held out",
        )
    return CheckResult(
        "split_overlap",
        PASS,
        f"{overlap:.0%} of validation examples found in training ({sample}; training repeats {repeats:.0%} of itself)",
    )
