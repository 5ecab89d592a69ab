"""The `rank_data` row: every rank reads its own share of the data, judged at the first training batch on
several ranks from a hash of each example, gathered in one collective (harness.checks.at_start.start_checks).
Ranks that read the same examples train on copies: N devices learn what one does."""

from __future__ import annotations

import hashlib
from collections import Counter

from torch.utils.data import DistributedSampler, IterableDataset

from harness.checks.data.batch_format import layout_fault
from harness.checks.data.loaders import row_bytes
from harness.checks.result import FAIL, PASS, SKIP, CheckResult

#: two ranks read the same examples when this share of their rows is alike position by position ...
ALIGNED = 0.9
#: ... or this share of one's rows is among the other's, in a batch whose own rows barely repeat (below REPEATS)
SHARED, REPEATS = 0.5, 0.1


def row_hashes(batch: dict) -> list[int]:
    """A 64-bit hash of each example of a Batch (inputs, targets, mask); [] for one that breaks the Batch
    layout."""
    if layout_fault(batch) is not None:
        return []
    cpu = {k: batch[k].detach().cpu() for k in ("input_ids", "targets", "loss_mask")}
    return [int.from_bytes(hashlib.blake2b(row, digest_size=8).digest(), "little") for row in row_bytes(cpu)]


def _copies_and_shared(a: list[int], b: list[int]) -> tuple[bool, int]:
    """Whether two ranks' rows are copies of each other, and how many rows they share."""
    shared = sum((Counter(a) & Counter(b)).values())
    aligned = sum(x == y for x, y in zip(a, b, strict=False)) / max(1, min(len(a), len(b)))
    repeats = max(1 - len(set(rows)) / max(1, len(rows)) for rows in (a, b))
    copies = aligned >= ALIGNED or (shared >= SHARED * min(len(a), len(b)) and repeats < REPEATS)
    return copies, shared


def copy_groups(hashes: list[list[int]]) -> list[tuple[list[int], int, int]]:
    """The groups of 2+ ranks that read the same examples, from each rank's row hashes: (ranks, rows the first
    two share, rows of the first)."""
    found: list[tuple[list[int], int, int]] = []
    placed: set[int] = set()
    for i, mine in enumerate(hashes):
        if i in placed or not mine:
            continue
        group, first = [i], None
        for j in range(i + 1, len(hashes)):
            if j in placed or not hashes[j]:
                continue
            copies, shared = _copies_and_shared(mine, hashes[j])
            if copies:
                group.append(j)
                first = first if first is not None else shared
        if len(group) > 1:
            placed.update(group)
            found.append((group, first, len(mine)))
    return found


def _ranks_text(ranks: list[int]) -> str:
    """`0 and 1`, `0, 2 and 3`; the first 8 and a count where there are more."""
    if len(ranks) > 8:
        return f"{', '.join(map(str, ranks[:8]))}, ... ({len(ranks)} ranks)"
    return f"{', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def _share_fix(loader) -> str:
    """What gives each rank its own share, by what `loader` (this rank's training loader) is."""
    # Lightning replaces a plain sampler by its distributed one; it cannot replace a sampler of one's own, nor
    # fix a stream that shards by worker only or a DistributedSampler made before the ranks existed
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, IterableDataset):
        return (
            "a stream (IterableDataset) must take every world-th example of its rank: in __iter__, "
            "torch.distributed.get_rank() and get_world_size(), and with workers every (world x workers)-th from "
            "rank x workers + worker id"
        )
    samplers = [
        getattr(loader, "sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    ]
    if any(isinstance(s, DistributedSampler) for s in samplers):
        return (
            "its DistributedSampler gives every rank the same share: make it in train_dataloader() without "
            "num_replicas or rank (they are read once the ranks exist)"
        )
    return (
        "a sampler or batch sampler of your own must be a distributed one (every world-th index for its rank, as "
        "DistributedSampler takes them); or give the DataLoader a plain sampler (shuffle=True) and Lightning shards it"
    )


def rank_data(hashes: list[list[int]], loader) -> CheckResult:
    """The `rank_data` row from every rank's row hashes of its first batch; `loader`, this rank's training
    loader, names the fix."""
    found, total = copy_groups(hashes), sum(len(h) for h in hashes)
    if not total:
        return CheckResult(
            "rank_data", SKIP, "not judged: no rank's first batch has the Batch layout (see batch_format)"
        )
    if not found:
        return CheckResult(
            "rank_data",
            PASS,
            f"{len(hashes)} ranks read their own examples ({total} rows of their first batches compared)",
        )
    said = "; ".join(
        f"ranks {_ranks_text(ranks)} read the same examples ({shared} of the {count} rows of their first batch "
        "alike)"
        for ranks, shared, count in found
    )
    return CheckResult(
        "rank_data",
        FAIL,
        f"{said}: each trains on copies of the others' batches; {_share_fix(loader)}",
    )
