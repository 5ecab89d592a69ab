"""The training loader as the fork configured it (its sampler, collate and workers): consecutive batches differ,
and a stream read by several workers hands out each example once an epoch, not once a worker."""

from __future__ import annotations

import time
from collections import Counter

import torch
from torch.utils.data import DataLoader

from harness.batches import collate_of, indexable
from harness.checks.base import FAIL, PASS, SKIP, CheckResult
from harness.checks.batch import layout_fault
from harness.checks.reads import cloned, reads

#: rows a stream is read for at most, by its loader's workers and again in this process, and seconds for each
ROWS, ROW_SECONDS = 512, 2.0
#: the stream's workers repeat examples when this share of the distinct rows one process reads is all they hand out
REPEATED = 0.75


def rows(batch: dict) -> list[bytes]:
    """Each example of a batch as bytes: its inputs, targets and mask."""
    parts = [batch[k].reshape(batch[k].shape[0], -1) for k in ("input_ids", "targets", "loss_mask")]
    return [b"|".join(p[r].numpy().tobytes() for p in parts) for r in range(parts[0].shape[0])]


def identical(a: dict, b: dict) -> bool:
    return all(
        a[k].shape == b[k].shape and bool(torch.equal(a[k], b[k]))
        for k in ("input_ids", "targets", "loss_mask")
    )


def stream_rows(loader, limit: int = ROWS, seconds: float = ROW_SECONDS) -> list[bytes]:
    """The rows of the first batches of `loader`, up to `limit` rows or `seconds`."""
    found, deadline = [], time.perf_counter() + seconds
    iterator = iter(loader)
    try:
        for batch in iterator:
            if layout_fault(batch) is not None:
                break
            found += rows(cloned(batch))
            if len(found) >= limit or time.perf_counter() > deadline:
                break
    finally:
        del iterator
    return found[:limit]


def workers_repeat(loader: DataLoader) -> str | None:
    """For a stream read by several workers: what it means when they hand out fewer distinct examples than the
    same stream read in this process does (every worker reading the whole stream), or None."""
    workers = loader.num_workers
    if workers < 2 or indexable(loader.dataset) or getattr(loader, "batch_sampler", None) is None:
        return None
    shared = stream_rows(loader)
    alone = stream_rows(
        DataLoader(loader.dataset, batch_size=loader.batch_size, collate_fn=collate_of(loader))
    )
    distinct, expected = len(set(shared)), len(set(alone[: len(shared)]))
    if not shared or distinct > REPEATED * expected:
        return None
    most = Counter(shared).most_common(1)[0][1]
    return (
        f"its {workers} workers hand out {distinct} distinct examples in {len(shared)} rows (read in one process: "
        f"{expected}), some {most} times: the workers read the same examples (each the whole stream, or the same "
        "share of it); give each its own share in the dataset's __iter__ (torch.utils.data.get_worker_info(): every "
        "num_workers-th example, starting at the worker's id)"
    )


def train_loader(model, data, cfg=None) -> CheckResult:
    """Consecutive training batches differ (a loader that hands out one batch every step trains on one batch), and
    a stream read by several workers yields each example once an epoch."""
    data = reads(data, cfg)
    loader = data.loader("train")
    batches = [b for b in data.batches("train") if layout_fault(b) is None]
    if not batches:
        return CheckResult(
            "train_loader", SKIP, "not judged: no training batch with the Batch layout (see batch_format)"
        )
    repeat = workers_repeat(loader)
    if repeat is not None:
        return CheckResult("train_loader", FAIL, f"the training stream repeats examples: {repeat}")
    for i, (a, b) in enumerate(zip(batches, batches[1:], strict=False)):
        if identical(a, b):
            same_rows = len(set(rows(a))) == 1 and a["input_ids"].shape[0] > 1
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
    told = (
        f"; {loader.num_workers} workers share the stream without repeats"
        if loader.num_workers > 1 and not indexable(loader.dataset)
        else ""
    )
    return CheckResult(
        "train_loader", PASS, f"the first {len(batches)} training batches differ from one another{told}"
    )
