"""`val_order`: the validation loader reads the same examples in the same order at every validation, as
Lightning reads it (one loader object, iterated again each time, its sampler told each epoch); beside
loaders.py, the training loader's rows."""

from __future__ import annotations

import contextlib
from itertools import islice

import torch
from pytorch_lightning.utilities.seed import isolate_rng
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from harness.checks.data.batch_format import layout_fault
from harness.checks.data.loaders import row_bytes, sampler_epochs
from harness.checks.data.reads import DataReads, as_data_reads, copied_batch
from harness.checks.result import FAIL, PASS, SKIP, CheckResult
from harness.data.batch import indexable

#: what a changing validation costs, said in every FAIL
COST = "the val loss and the validation examples the probes show change between validations"


def _drawn_at_random(sampler) -> tuple[str, str] | None:
    """(what `sampler` is, the one-line fix) where it draws another order at each pass, else None."""
    name = type(sampler).__name__
    if isinstance(sampler, DistributedSampler):
        if not hasattr(sampler, "shuffle"):  # a subclass of its own (the harness's EpochPermutation)
            return f"a {name}, which orders each epoch anew", "read validation in order: shuffle=False"
        if not sampler.shuffle:
            return None
        return (
            f"a {name} with shuffle=True (its default), re-shuffled at every epoch's set_epoch",
            f"build it with {name}(..., shuffle=False)",
        )
    if isinstance(sampler, SubsetRandomSampler):
        return f"a {name}", "read the subset in order: DataLoader(Subset(dataset, indices), shuffle=False)"
    if isinstance(sampler, WeightedRandomSampler):
        return f"a {name} (examples drawn with their weights)", "read every example once: shuffle=False"
    if isinstance(sampler, RandomSampler):
        return f"a {name}", "build the loader with shuffle=False (a SequentialSampler)"
    return None


def _random_sampler(loader) -> str | None:
    """Why `loader` reads its examples in another order at each pass, from its sampler's class alone, or None."""
    if not isinstance(loader, DataLoader) or not indexable(loader.dataset):
        return None
    batches = loader.batch_sampler
    if batches is not None and not hasattr(batches, "sampler"):
        return None  # a batch sampler of its own: its order is read, not named
    # a loader given a batch sampler still makes a SequentialSampler it never reads: the batch sampler's counts
    sampler = loader.sampler if batches is None else batches.sampler
    where = "sampler" if sampler is loader.sampler else "batch sampler's sampler"
    found = _drawn_at_random(sampler)
    if found is None:
        return None
    what, fix = found
    return (
        f"the validation loader's {where} is {what}: every validation reads another order, so {COST}; {fix}"
    )


@contextlib.contextmanager
def _rng_kept(loader):
    """Whatever the reads draw, from the global generators or the loader's own, is put back on leaving."""
    owners = (
        loader,
        getattr(loader, "sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    )
    own = {
        id(g): g for g in (getattr(o, "generator", None) for o in owners) if isinstance(g, torch.Generator)
    }
    states = [(g, g.get_state()) for g in own.values()]
    try:
        # training starts as if the row never read: a resumed run stays bit for bit (past an exception, which
        # pytest makes the row's failure, the preflight's own isolate_rng puts the global generators back)
        with isolate_rng():
            yield
    finally:
        for generator, state in states:
            generator.set_state(state)


def _read_again(loader, count: int) -> list:
    """The first `count` batches of `loader`, the same object iterated once more, as the next validation does."""
    iterator = iter(loader)
    try:
        return [copied_batch(b) for b in islice(iterator, count)]
    finally:
        del iterator  # its worker processes end here (persistent ones stay, as under Lightning)


def _batches(count: int) -> str:
    return "the first batch" if count == 1 else f"the first {count} batches"


def _shown(order: list) -> str:
    return ", ".join(map(str, order[:5])) + ", ..."


def _sampler_moves(loader) -> str | None:
    """Why a map-style loader's sampler hands out another order at the next validation (read from a copy, each
    pass announced with set_epoch as Lightning announces it), or None."""
    if not isinstance(loader, DataLoader) or not indexable(loader.dataset):
        return None
    first, second = sampler_epochs(loader)
    if first == second:
        return None
    sampler = getattr(loader.batch_sampler, "sampler", None)
    sampler = loader.sampler if sampler is None else sampler
    return (
        f"the validation loader's sampler ({type(sampler).__name__}) hands out another order at the next "
        f"validation ({_shown(first)} then {_shown(second)}), so {COST}; read validation in index order: "
        "shuffle=False, a SequentialSampler"
    )


def _differs(first: list[bytes], second: list[bytes], streamed: bool) -> str:
    """A FAIL's detail for two reads of the validation loader that differ (the sampler's order kept)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
        min(map(len, (first, second))),
    )
    how = "the same examples in another order" if sorted(first) == sorted(second) else "other examples"
    where = f"{how} from row {at} on ({len(first)} rows read twice)"
    if streamed:
        return (
            f"two reads of the validation stream hand out {where}: it shuffles or draws at random as it streams, so "
            f"{COST}; stream validation in one fixed order, its examples drawn once from a fixed seed"
        )
    return (
        f"two reads of the val loader hand out {where}, its sampler's order alike: the val dataset's "
        "__getitem__ draws at random or changes what it reads (static_batches names the key), so "
        f"{COST}; draw validation examples once, from a fixed seed, in setup"
    )


def val_order(model, data, cfg=None) -> CheckResult:
    """The validation loader reads the same examples in the same order at every validation: its sampler's
    class, its order over two announced epochs, and its first batches read twice through the one loader."""
    data = as_data_reads(data, cfg)
    if not callable(getattr(data.module, "val_dataloader", None)):
        return CheckResult("val_order", SKIP, "not judged: the datamodule has no val_dataloader()")
    loader = data.loader("val")
    if loader is None:
        return CheckResult("val_order", SKIP, "not judged: the datamodule has no validation loader")
    shuffles = _random_sampler(loader)
    if shuffles is not None:  # named even where the first batches happen to agree
        return CheckResult("val_order", FAIL, shuffles)
    with _rng_kept(loader):  # no re-seeding between the reads: Lightning does none between validations
        return _read_twice(data, loader)


def _read_twice(data: DataReads, loader) -> CheckResult:
    """val_order past its sampler's class: the sampler's order on two validations, then the loader's rows."""
    first = data.batches("val")
    if not first or any(layout_fault(b) is not None for b in first):
        return CheckResult(
            "val_order", SKIP, "not judged: no validation batch with the Batch layout (see batch_format)"
        )
    moves = _sampler_moves(loader)
    if moves is not None:
        return CheckResult("val_order", FAIL, moves)
    second = [b for b in _read_again(loader, len(first)) if layout_fault(b) is None]
    rows = [r for b in first for r in row_bytes(b)]
    again = [r for b in second for r in row_bytes(b)]
    if rows != again:
        streamed = isinstance(loader, DataLoader) and not indexable(loader.dataset)
        return CheckResult("val_order", FAIL, _differs(rows, again, streamed))
    return CheckResult(
        "val_order",
        PASS,
        f"two validations read the same {len(rows)} examples in the same order ({_batches(len(first))}, read "
        "twice through the one loader, byte for byte)",
    )
