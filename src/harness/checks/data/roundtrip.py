"""`data_roundtrip`: rows decode back to the records they were made from (a mismatch diagnosed by
harness.checks.data.roundtrip_causes); `static_batches`: fixed loaders hand out the same batches every pass.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from harness.checks.data.batch_format import (
    first_out_of_range,
    layout_fault,
    pad_ids,
    special_ids,
    vocab_size,
)
from harness.checks.data.reads import SPLITS, as_data_reads
from harness.checks.data.roundtrip_causes import (
    agrees,
    diagnose,
    is_classification,
    padding_of,
    quoted_difference,
    quoted_excerpt,
    readings,
    time_major,
    unpadded_text,
)
from harness.checks.result import FAIL, PASS, SKIP, WARN, CheckResult
from harness.data.batch import indexable

#: rows of each split's first batch the round trip decodes, and records of a stream searched for a row's source
EXAMPLES, STREAM_SEARCH = 8, 256


def _record_of(source, i: int) -> dict | None:
    """record(i) of `source`, None past its end."""
    try:
        return source.record(i)
    except (IndexError, KeyError):
        return None


def data_roundtrip(model, data, cfg=None) -> CheckResult:
    """Each split's first batch, made by its loader's own sampler and collate, decodes back to the source
    records of its examples; a mismatch names the known mistake it fits."""
    data = as_data_reads(data, cfg)
    checked = 0
    for split in SPLITS:
        if data.record_source(split) is None:
            return CheckResult(
                "data_roundtrip", WARN, f"the {split} dataset has no record(i): nothing to compare with"
            )
        traced = data.indexed(split)
        if traced is None:
            continue
        result = _split_roundtrip(data, split, *traced)
        if isinstance(result, CheckResult):
            return result
        checked += result
    if not checked:
        return CheckResult("data_roundtrip", SKIP, "not judged: no batch could be traced to its examples")
    return CheckResult(
        "data_roundtrip",
        PASS,
        f"{checked} examples decode back to their source (read through the loaders' own sampler and collate)",
    )


def _split_roundtrip(data, split: str, batch, indices: list[int]) -> CheckResult | int:
    """The round trip of one split's first batch (rows `indices`): a CheckResult where settled, else how many
    rows decode back."""
    source, tokenizer = data.record_source(split), data.tokenizer
    if layout_fault(batch) is not None:
        return CheckResult(
            "data_roundtrip", SKIP, "not judged: the batches are not Batches (see batch_format)"
        )
    if time_major(batch, rows=len(indices)):
        return CheckResult(
            "data_roundtrip", FAIL, f"{split} example {indices[0]}: {time_major(batch, len(indices))}"
        )
    if first_out_of_range(batch, vocab_size(tokenizer) or 0) is not None:
        return CheckResult(
            "data_roundtrip", SKIP, "not judged: the batch holds ids no tokenizer decodes (see ids_in_range)"
        )
    if not bool(batch["loss_mask"].any()):
        return CheckResult(
            "data_roundtrip", SKIP, "not judged: the loss mask is empty, no target to read (see loss_mask)"
        )
    records = [_record_of(source, i) for i in indices]
    first = next((r for r in records if r is not None), None)
    if first is not None and not isinstance(first.get("text") if hasattr(first, "get") else None, str):
        keys = ", ".join(map(str, first)) if hasattr(first, "keys") else type(first).__name__
        return CheckResult(
            "data_roundtrip",
            WARN,
            f"not judged: record(i) of the {split} dataset holds {keys}; the round trip compares its 'text' (the "
            "example's text as its tokens hold it) and, for classification, its 'label'",
        )
    classify = is_classification(first, tokenizer)
    pads, specials = pad_ids(tokenizer), set(special_ids(tokenizer).values())
    checked = 0
    for row, (index, record) in enumerate(list(zip(indices, records, strict=True))[:EXAMPLES]):
        one = {k: batch[k][row] for k in ("input_ids", "targets", "loss_mask")}
        if not bool(one["loss_mask"].any()):  # no target to read: loss_mask says so
            continue
        if record is not None and agrees(one, record, tokenizer, classify, pads, specials):
            checked += 1
        elif not indexable(source) and _found_in(source, one, tokenizer, classify, pads, specials):
            checked += 1  # a stream that yields its examples in another order than record(i) counts them
        else:
            context = dict(
                tokenizer=tokenizer, classify=classify, pads=pads, specials=specials, rows=len(indices)
            )
            cause = diagnose(batch, row, index, records, lambda j: _record_of(source, j), **context)
            fix = cause or "check how each text is encoded and cut into input_ids and targets"
            return CheckResult(
                "data_roundtrip",
                FAIL,
                f"{split} example {index}: {_first_difference_text(one, record, index, **context)}; {fix}",
            )
    return checked


def _first_difference_text(
    row: dict, record: dict | None, index: int, tokenizer, classify: bool, pads, specials, **_
) -> str:
    """Where a row and its source first differ, both quoted without the padding around their text."""
    if record is None:
        return f"record({index}) does not exist"
    got = (readings(row, tokenizer, classify, pads, specials) or [{"text": "(no token it decodes)"}])[0]
    padding = padding_of(tokenizer, pads)
    return quoted_difference(unpadded_text(got, padding), unpadded_text(record, padding))


def _found_in(source, row: dict, tokenizer, classify: bool, pads: set[int], specials: set[int]) -> bool:
    """Whether one of the first STREAM_SEARCH records of a stream is the source of `row`."""
    for j in range(STREAM_SEARCH):
        record = _record_of(source, j)
        if record is None:
            return False
        if agrees(row, record, tokenizer, classify, pads, specials):
            return True
    return False


def _in_order(loader) -> bool:
    """True when the loader yields its dataset in order, unshuffled (its batches are the same every pass)."""
    if not isinstance(loader, DataLoader):  # a list of batches, say: the same every pass
        return True
    batches = loader.batch_sampler
    if isinstance(batches, list):  # an explicit list of index batches
        return all(b == list(range(b[0], b[0] + len(b))) for b in batches[:1])
    if batches is None:  # no batching by the loader: a dataset read in its own order
        return not indexable(loader.dataset) or isinstance(loader.sampler, SequentialSampler)
    return isinstance(batches, BatchSampler) and isinstance(batches.sampler, SequentialSampler)


def _difference_text(a, b) -> str:
    """The first places two values of one key differ, briefly: positions and values, never whole tensors."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape {list(a.shape)} {a.dtype} then {list(b.shape)} {b.dtype}"
        where = (a != b).nonzero()[:3].tolist()
        places = "; ".join(
            f"at {tuple(w) if len(w) > 1 else w[0]}: {a[tuple(w)].item()} then {b[tuple(w)].item()}"
            for w in where
        )
        return f"{int((a != b).sum())} of {a.numel()} values differ ({places})"
    return f"{quoted_excerpt(repr(a))} then {quoted_excerpt(repr(b))}"


def _values_equal(a, b) -> bool:
    """Equal, whatever a batch's extra keys hold: tensors, numpy arrays, lists and dicts of them, plain
    values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_values_equal, a, b))
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value that cannot say whether it equals another: compared as text
        return repr(a) == repr(b)


def static_batches(
    model, data, cfg=None, batches: int = 3, allowed_to_vary: tuple[str, ...] = ()
) -> CheckResult:
    """Two passes over each fixed (unshuffled) loader give identical batches, key by key."""
    data = as_data_reads(data, cfg)
    allowed = set(allowed_to_vary) | set((cfg or {}).get("static_batches_vary", None) or [])
    compared = fixed_loaders = 0
    for split in SPLITS:
        loader = data.loader(split)
        if loader is None or not _in_order(loader):
            continue
        fixed_loaders += 1
        first = data.batches(split, batches)
        second = [b for _, b in zip(range(batches), loader, strict=False)]
        for i, (one, two) in enumerate(zip(first, second, strict=False)):
            if not (isinstance(one, Mapping) and isinstance(two, Mapping)):
                continue
            for key in sorted(set(one) | set(two)):
                if key in allowed:
                    continue
                if key not in one or key not in two or not _values_equal(one[key], two[key]):
                    how = (
                        "present in one pass only"
                        if key not in one or key not in two
                        else _difference_text(one[key], two[key])
                    )
                    return CheckResult(
                        "static_batches",
                        FAIL,
                        f"{split} loader, batch {i}, key {key!r} differs between two passes: {how}; something "
                        "mutates or re-randomizes batches (allow a key to vary with static_batches_vary)",
                    )
            compared += 1
    if not compared:
        fixed = "no fixed loader with batches of the Batch layout (see batch_format)"
        return CheckResult(
            "static_batches",
            SKIP if fixed_loaders else PASS,
            fixed if fixed_loaders else "no loader is fixed: every one shuffles (nothing to compare)",
        )
    return CheckResult("static_batches", PASS, f"{compared} batches identical over two passes, key by key")
