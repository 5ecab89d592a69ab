"""The training loader as the fork configured it (sampler, collate, workers): `train_loader` (consecutive
batches differ; a stream's workers hand out each example once an epoch) and `epoch_order` (epochs begin in
different orders)."""

from __future__ import annotations

import copy
import operator
import time
from collections import Counter
from itertools import islice

import torch
from torch.utils.data import DataLoader

from harness.checks.data.batch_format import layout_fault
from harness.checks.data.reads import DataReads, as_data_reads, copied_batch
from harness.checks.result import FAIL, PASS, SKIP, CheckResult
from harness.data.batch import collate_of, indexable

#: rows a stream is read for at most, by its loader's workers and again in this process, and seconds for each
ROWS, ROW_SECONDS = 512, 2.0
#: the stream's workers repeat examples when this share of the distinct rows one process reads is all they hand out
REPEATED = 0.75
#: the indices of each epoch's order compared at most (the sampler's, not the data's)
ORDER = 256


def row_bytes(batch: dict) -> list[bytes]:
    """Each example of a batch as bytes: its inputs, targets and mask."""
    parts = [batch[k].reshape(batch[k].shape[0], -1) for k in ("input_ids", "targets", "loss_mask")]
    return [b"|".join(p[r].numpy().tobytes() for p in parts) for r in range(parts[0].shape[0])]


def _batches_identical(a: dict, b: dict) -> bool:
    return all(
        a[k].shape == b[k].shape and bool(torch.equal(a[k], b[k]))
        for k in ("input_ids", "targets", "loss_mask")
    )


def _stream_rows(loader, limit: int = ROWS, seconds: float = ROW_SECONDS) -> list[bytes]:
    """The rows of the first batches of `loader`, up to `limit` rows or `seconds`."""
    found, deadline = [], time.perf_counter() + seconds
    iterator = iter(loader)
    try:
        for batch in iterator:
            if layout_fault(batch) is not None:
                break
            found += row_bytes(copied_batch(batch))
            if len(found) >= limit or time.perf_counter() > deadline:
                break
    finally:
        del iterator
    return found[:limit]


def _workers_repeat(loader: DataLoader, shared: list[bytes] | None = None) -> str | None:
    """Why a stream's workers hand out fewer distinct examples than one process reads, or None; `shared`: the
    loader's rows, where read already."""
    workers = loader.num_workers
    if workers < 2 or indexable(loader.dataset) or getattr(loader, "batch_sampler", None) is None:
        return None
    shared = _stream_rows(loader) if shared is None else shared
    in_one_process = _stream_rows(
        DataLoader(loader.dataset, batch_size=loader.batch_size, collate_fn=collate_of(loader))
    )
    distinct, expected = len(set(shared)), len(set(in_one_process[: len(shared)]))
    if not shared or distinct > REPEATED * expected:
        return None
    most = Counter(shared).most_common(1)[0][1]
    return (
        f"its {workers} workers hand out {distinct} distinct examples in {len(shared)} rows (read in one process: "
        f"{expected}), some {most} times: the workers read the same examples (each the whole stream, or the same "
        "share of it); give each its own share in the dataset's __iter__ (torch.utils.data.get_worker_info(): every "
        "num_workers-th example, starting at the worker's id)"
    )


def _first_pass(data: DataReads, loader: DataLoader) -> list[bytes] | None:
    """A training stream's first rows through its loader, read once for every check (None for a map-style
    dataset)."""
    if indexable(loader.dataset):
        return None
    return data.once(("stream_rows", "train"), lambda: _stream_rows(loader))


def train_loader(model, data, cfg=None) -> CheckResult:
    """Consecutive training batches differ, and a stream read by several workers yields each example once an
    epoch."""
    data = as_data_reads(data, cfg)
    loader = data.loader("train")
    batches = [b for b in data.batches("train") if layout_fault(b) is None]
    if not batches:
        return CheckResult(
            "train_loader", SKIP, "not judged: no training batch with the Batch layout (see batch_format)"
        )
    repeat = _workers_repeat(loader, _first_pass(data, loader))
    if repeat is not None:
        return CheckResult("train_loader", FAIL, f"the training stream repeats examples: {repeat}")
    for i, (a, b) in enumerate(zip(batches, batches[1:], strict=False)):
        if _batches_identical(a, b):
            same_rows = len(set(row_bytes(a))) == 1 and a["input_ids"].shape[0] > 1
            why = (
                "and every example in it is the same one: the dataset's __getitem__ ignores its index"
                if same_rows
                else "the sampler hands out the same indices every step (restarted, or re-seeded on each call), or "
                "the dataset returns one batch over and over"
            )
            return CheckResult(
                "train_loader",
                FAIL,
                f"training batches {i} and {i + 1} are identical, key by key: training sees one batch; {why}",
            )
    if len(batches) == 1:
        return CheckResult("train_loader", PASS, "one training batch an epoch: no two to compare")
    workers = (
        f"; {loader.num_workers} workers share the stream without repeats"
        if loader.num_workers > 1 and not indexable(loader.dataset)
        else ""
    )
    return CheckResult(
        "train_loader", PASS, f"the first {len(batches)} training batches differ from one another{workers}"
    )


def sampler_epochs(loader: DataLoader, epochs: int = 2) -> list[list[int]]:
    """The first ORDER indices of `loader`'s sampler in each of `epochs` epochs announced as Lightning does,
    read from a copy of the sampler."""
    dataset = loader.dataset
    try:
        # the dataset shared, not copied
        sampler, batches = copy.deepcopy((loader.sampler, loader.batch_sampler), memo={id(dataset): dataset})
    except Exception:  # a sampler that cannot be copied (a lock, a handle): read as it is
        sampler, batches = loader.sampler, loader.batch_sampler
    orders = []
    for epoch in range(epochs):
        for target in _set_epoch_targets(sampler, batches):
            target.set_epoch(epoch)
        indices = (i for batch in batches for i in batch) if batches is not None else iter(sampler)
        orders.append([_as_index(i) for i in islice(indices, ORDER)])
    return orders


def _set_epoch_targets(sampler, batches) -> list:
    """What Lightning calls set_epoch(epoch) on before each epoch: the loader's sampler and its batch
    sampler's sampler (never the batch sampler itself, nor the dataset)."""
    found = {
        id(s): s
        for s in (sampler, getattr(batches, "sampler", None))
        if callable(getattr(s, "set_epoch", None))
    }
    return list(found.values())


def _as_index(key):
    """A sampler's key as a plain int where it is one (a 0-dim tensor too), else as it is (a string key)."""
    try:
        return operator.index(key)
    except TypeError:
        return key


def _is_increasing(order: list) -> bool:
    """Whether `order` is in increasing order (an unshuffled sampler's, or its rank's share of one)."""
    try:
        return all(a < b for a, b in zip(order, order[1:], strict=False))
    except TypeError:  # keys that do not compare
        return False


def _has_set_epoch(dataset) -> bool:
    """Whether `dataset`, or a dataset it wraps (`.dataset`, as a shuffle buffer holds its source), has set_epoch."""
    seen = 0
    while dataset is not None and seen < 8:
        if callable(getattr(dataset, "set_epoch", None)):
            return True
        dataset, seen = getattr(dataset, "dataset", None), seen + 1
    return False


def epoch_order(model, data, cfg=None) -> CheckResult:
    """Two epochs of training do not begin in the same shuffled order: the sampler's indices over two
    announced epochs, or a stream read twice through its loader."""
    data = as_data_reads(data, cfg)
    loader = data.loader("train")
    if loader is None:
        return CheckResult("epoch_order", SKIP, "not judged: the datamodule has no training loader")
    return _sampler_order(loader) if indexable(loader.dataset) else _stream_order(data, loader)


def _sampler_order(loader: DataLoader) -> CheckResult:
    """epoch_order for a map-style dataset: its sampler's indices in epochs 0 and 1."""
    first, second = sampler_epochs(loader)
    if len(first) < 2:
        return CheckResult("epoch_order", PASS, "one example an epoch: no order to compare")
    if first != second:
        return CheckResult(
            "epoch_order", PASS, f"epochs 0 and 1 begin in different orders (the first {len(first)} indices)"
        )
    shown = ", ".join(map(str, first[:6]))
    if _is_increasing(first):
        return CheckResult(
            "epoch_order",
            PASS,
            f"unshuffled: every epoch reads the examples in index order ({shown}, ...), as shuffle=False asks",
        )
    why = (
        "ignores the set_epoch(epoch) Lightning calls"
        if _set_epoch_targets(loader.sampler, loader.batch_sampler)
        else "has no set_epoch(epoch) for Lightning to call"
    )
    return CheckResult(
        "epoch_order",
        FAIL,
        f"epochs 0 and 1 begin in the same shuffled order ({shown}, ...; {len(first)} indices alike): the sampler "
        f"is re-seeded alike every pass and {why}; seed it with the epoch (seed + epoch, as DistributedSampler "
        "does), or shuffle with one generator that advances (DataLoader(shuffle=True, generator=...))",
    )


def _stream_order(data: DataReads, loader: DataLoader) -> CheckResult:
    """epoch_order for a stream: its first rows through its loader (workers and all) on two passes."""
    first, second = _first_pass(data, loader), _stream_rows(loader)
    count = min(len(first), len(second))
    if count < 2:
        return CheckResult("epoch_order", PASS, "fewer than 2 training examples a pass: no order to compare")
    if first[:count] != second[:count]:
        return CheckResult(
            "epoch_order",
            PASS,
            f"two passes over the training stream begin in different orders ({count} rows read)",
        )
    if _has_set_epoch(loader.dataset):
        return CheckResult(
            "epoch_order",
            FAIL,
            f"two passes over the training stream begin alike ({count} rows in the same order), and its "
            "set_epoch(epoch) is never called (Lightning calls a sampler's, not a dataset's): call it before each "
            "epoch (a callback's on_train_epoch_start), or seed its shuffle from the DataLoader's worker seed",
        )
    return CheckResult(
        "epoch_order",
        PASS,
        f"the training stream begins alike on two passes ({count} rows): a fixed order, as a stream read once "
        "needs; if it shuffles, seed the shuffle with the epoch",
    )
