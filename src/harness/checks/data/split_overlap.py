"""`split_overlap`: training and validation hold different examples, judged on a bounded sample of each split:
whole examples by hash, long ones also by their SHINGLE-token stretches against training read as one stream.
An overlap counts only where training's own repeats cannot explain it."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch

from harness.checks.data.batch_format import layout_fault, pad_ids
from harness.checks.data.reads import as_data_reads
from harness.checks.result import FAIL, PASS, SKIP, CheckResult
from harness.data.batch import collate_of

#: validation items hashed at most
VAL_ITEMS = 1024
#: an overlap this large (a share of the validation examples read: real text repeats some passages, the built-in
#: corpus 11% of its 17-character chunks) fails, where training's own repeats make it this unlikely by chance
OVERLAP, CHANCE = 0.3, 0.01
#: examples this long are also compared by stretches of SHINGLE tokens; a validation example counts as found in
#: training when COVERED of its positions lie in stretches the training sample holds
LONG, SHINGLE, COVERED = 64, 32, 0.9


def _collated_alone(item, collate) -> dict | None:
    """An item collated alone by its loader's collate (one row, no padding); None where that is no Batch."""
    try:
        batch = collate([item])
    except Exception:  # an item its own collate refuses alone: nothing to compare
        return None
    if layout_fault(batch) is not None or batch["input_ids"].shape[0] != 1:
        return None
    return {k: batch[k][0] for k in ("input_ids", "targets", "loss_mask")}


def _content_ids(row: dict, pads: set[int]) -> np.ndarray:
    """An example's content as int64 ids: its inputs to its last masked position and that target, padding left
    out."""
    ids, mask = row["input_ids"], row["loss_mask"]
    masked = mask.nonzero().flatten()
    end = int(masked[-1]) + 1 if len(masked) else len(ids)
    whole = torch.cat([ids[:end], row["targets"][end - 1 : end] if len(masked) else ids[:0]])
    kept = whole.numpy().astype(np.int64)
    return kept[~np.isin(kept, list(pads))] if pads else kept


def _example_key(row: dict) -> bytes:
    """What makes an example the example it is: its inputs and the targets the loss sees."""
    labels = row["targets"][row["loss_mask"]].numpy().astype(np.int64).tobytes()
    return row["input_ids"].numpy().astype(np.int64).tobytes() + b"|" + labels


def _shingles(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A 64-bit hash of every stretch of `size` consecutive ids, and whether each holds more than one id (a
    run of one token tells nothing of where text came from)."""
    windows = np.lib.stride_tricks.sliding_window_view(ids.astype(np.uint64), size)
    powers = np.uint64(1_000_003) ** np.arange(size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        hashes = (windows * powers).sum(axis=1, dtype=np.uint64)
    return hashes, windows.min(axis=1) != windows.max(axis=1)


def _covered_share(ids: np.ndarray, known: np.ndarray, size: int) -> float:
    """The share of `ids`' positions inside a stretch of `size` whose hash is in `known` (sorted)."""
    hashes, varied = _shingles(ids, size)
    where = np.minimum(np.searchsorted(known, hashes), len(known) - 1)
    hit = (known[where] == hashes) & varied
    inside = np.zeros(len(ids), dtype=bool)
    for start in np.flatnonzero(hit):
        inside[start : start + size] = True
    return float(inside.mean())


def _found_stretches(train: list[np.ndarray], val: list[np.ndarray]) -> tuple[int, int]:
    """(long validation examples with COVERED of their positions in training's stretches, long validation
    examples); training is also read as one stream."""
    longs = [ids for ids in val if len(ids) >= LONG]
    streams = [ids for ids in train if len(ids) >= SHINGLE]
    if (
        train
    ):  # items joined in order, whole or less their last token: windows that tile a stream, or share one
        streams += [np.concatenate(train), np.concatenate([ids[:-1] for ids in train])]
    if not longs or not streams:
        return 0, 0
    found = [_shingles(ids, SHINGLE) for ids in streams if len(ids) >= SHINGLE]
    known = np.unique(np.concatenate([hashes[varied] for hashes, varied in found]))
    return sum(_covered_share(ids, known, SHINGLE) >= COVERED for ids in longs), len(longs)


def _by_chance(hits: int, n: int, p: float) -> float:
    """P(at least `hits` of `n` validation examples are in training) where each is with probability `p`."""
    if hits <= 0:
        return 1.0
    p = min(max(p, 1e-12), 1 - 1e-12)
    terms = [
        math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log1p(-p)
        )
        for k in range(hits, n + 1)
    ]
    return min(1.0, sum(terms))


def split_overlap(model, data, cfg=None) -> CheckResult:
    """No validation example is a training example beyond what chance gives: whole examples by hash, long ones
    also by their stretches."""
    data = as_data_reads(data, cfg)
    train_set, val_set = data.dataset("train"), data.dataset("val")
    if train_set is not None and train_set is val_set:
        return CheckResult(
            "split_overlap",
            FAIL,
            "val_dataset is train_dataset itself: validation measures memorization; hold examples out for it",
        )
    items, share = data.items("train")
    train = [
        r for r in (_collated_alone(i, collate_of(data.loader("train"))) for i in items) if r is not None
    ]
    items, _ = data.items("val", limit=VAL_ITEMS)
    val = [r for r in (_collated_alone(i, collate_of(data.loader("val"))) for i in items) if r is not None]
    if not train or not val:
        return CheckResult("split_overlap", SKIP, "not judged: no example of both splits could be read")
    train_keys, val_keys = Counter(map(_example_key, train)), list(map(_example_key, val))
    hits = sum(k in train_keys for k in val_keys)
    repeats = sum(c for c in train_keys.values() if c > 1) / len(train)
    chance = _by_chance(hits, len(val_keys), max(repeats, 1 / (2 * len(train))))
    pads = pad_ids(data.tokenizer)
    found, longs = _found_stretches(
        [_content_ids(r, pads) for r in train], [_content_ids(r, pads) for r in val]
    )
    overlap, stretched = hits / len(val_keys), found / longs if longs else 0.0
    sample = f"{len(val)} validation and {len(train)} training examples read" + (
        f" ({share:.0%} of the training set)" if 0 < share < 1 else ""
    )
    if overlap >= OVERLAP and chance < CHANCE:
        return CheckResult(
            "split_overlap",
            FAIL,
            f"{hits} of the validation examples ({overlap:.0%}) are training examples too ({sample}; training repeats "
            f"{repeats:.0%} of itself): validation then measures memorization; split the examples once and keep the "
            "validation ones out of training",
        )
    if found >= min(3, longs) and stretched >= OVERLAP:
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
