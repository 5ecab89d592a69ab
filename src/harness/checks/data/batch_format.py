"""The layout checks of the batches a fork's loaders hand out: `batch_format` (the Batch contract) and
`ids_in_range` (every id inside the vocabulary); and `sample_rows`, the batch the model checks run on, marked
`unusable` where no model can be judged on it."""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch

from harness.checks.data.reads import SPLITS, as_data_reads
from harness.checks.result import FAIL, PASS, SKIP, CheckResult, SampleBatch
from harness.data.batch import first_items, first_rows

KEYS = ("input_ids", "targets", "loss_mask")
#: the names a tokenizer's padding token goes by, where it declares no pad_id
PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>", "<PAD>", "<|padding|>")
#: the id types an embedding reads (the contract's is torch.long); targets are torch.long, which the loss indexes by
ID_TYPES = (torch.long, torch.int32)
#: a layout check collates this many items (another count where an item is this long: a square is ambiguous)
PROBE_ROWS = (3, 5)


def _as_whole_number(value) -> int | None:
    """`value` as an int where it is an integer of any type (a numpy int64, say; not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def vocab_size(tokenizer) -> int | None:
    return _as_whole_number(getattr(tokenizer, "vocab_size", None))


def special_ids(tokenizer) -> dict[str, int]:
    """The tokenizer's special ids it declares: bos_id, eos_id, pad_id (those that are not None)."""
    found = {}
    for name in ("bos_id", "eos_id", "pad_id"):
        value = _as_whole_number(getattr(tokenizer, name, None))
        if value is not None:
            found[name] = value
    return found


def pad_ids(tokenizer) -> set[int]:
    """The padding ids a tokenizer declares: `pad_id`, a Hugging Face `pad_token_id`, or a pad-named token of
    its `tokenizers` backend."""
    found = {v for k, v in special_ids(tokenizer).items() if k == "pad_id"}
    hf = _as_whole_number(getattr(tokenizer, "pad_token_id", None))
    if hf is not None:
        found.add(hf)
    for attribute in ("backend", "backend_tokenizer", "_tokenizer"):
        backend = getattr(tokenizer, attribute, None)
        if backend is not None and hasattr(backend, "token_to_id"):
            found |= {i for i in map(backend.token_to_id, PAD_NAMES) if i is not None}
    return found


def layout_fault(batch, rows: int | None = None, length: int | None = None) -> str | None:
    """What breaks the Batch contract in `batch` (a phrase), or None; `rows`: the examples it collates (shows
    a time-major layout), `length`: data.length."""
    if not isinstance(batch, Mapping):
        return f"a {type(batch).__name__}, not a dict with keys {', '.join(KEYS)}"
    missing = [k for k in KEYS if k not in batch]
    if missing:
        return f"no key {', '.join(map(repr, missing))} (it has {', '.join(map(repr, batch))})"
    loose = [k for k in KEYS if not isinstance(batch[k], torch.Tensor)]
    if loose:
        return f"{loose[0]!r} is a {type(batch[loose[0]]).__name__}, not a tensor"
    ids, targets, mask = (batch[k] for k in KEYS)
    for key, tensor, allowed in (("input_ids", ids, ID_TYPES), ("targets", targets, (torch.long,))):
        if tensor.dtype not in allowed:
            return (
                f"{key!r} is {tensor.dtype}: token ids are torch.long (.long()): an embedding reads int64 or "
                "int32 ids, the loss int64 targets"
            )
    if mask.dtype != torch.bool:
        return f"'loss_mask' is {mask.dtype}: make it torch.bool (mask.bool()): a 0/1 integer mask indexes, not masks"
    if ids.dim() != 2:
        return f"'input_ids' has shape {list(ids.shape)}: a Batch is [batch, time]"
    if targets.shape != ids.shape or mask.shape != ids.shape:
        shapes = ", ".join(f"{k} {list(batch[k].shape)}" for k in KEYS)
        return f"the shapes differ ({shapes}): all three are [batch, time]"
    if rows is not None and ids.shape[1] == rows != ids.shape[0]:
        return (
            f"laid out time-major: 'input_ids' is {list(ids.shape)} for {rows} examples, [time, batch]; stack "
            "the examples on the first axis (torch.stack(rows), or rearrange(x, 'time b -> b time'))"
        )
    if length is not None and ids.shape[1] > length:
        return (
            f"{ids.shape[1]} positions, more than data.length={length}: the model embeds at most data.length"
        )
    return None


def _probe_rows(data, split: str) -> tuple[dict | None, int]:
    """A few of the split's first items collated by its loader's collate, and their count (unlike their
    length: a time-major layout shows)."""
    from harness.data.batch import collate_of

    dataset = data.dataset(split)
    first = first_items(dataset, 1)
    if not first:
        return None, 0
    length = len(first[0]["input_ids"]) if isinstance(first[0], Mapping) and "input_ids" in first[0] else 0
    rows = PROBE_ROWS[length == PROBE_ROWS[0]]
    items = first_items(dataset, rows)
    return collate_of(data.loader(split))(items), len(items)


def read_batches(data, splits=SPLITS) -> list[tuple[str, int, dict]]:
    """(split, batch number, batch) of the batches read from each split's loader that keep the layout."""
    return [
        (split, b, batch)
        for split in splits
        for b, batch in enumerate(data.batches(split))
        if layout_fault(batch, length=data.length) is None
    ]


def batch_format(model, data, cfg=None) -> CheckResult:
    """Every batch the loaders hand out is a Batch: a dict of input_ids, targets (integers) and loss_mask (bool),
    all [batch, time], no longer than data.length."""
    data = as_data_reads(data, cfg)
    shapes = {}
    for split in SPLITS:
        probe, rows = _probe_rows(data, split)
        candidates = [(f"{split} examples 0-{rows - 1}, collated", probe, rows)] if probe is not None else []
        candidates += [(f"{split} batch {b}", batch, None) for b, batch in enumerate(data.batches(split))]
        for where, batch, count in candidates:
            fault = layout_fault(batch, rows=count, length=data.length)
            if fault is not None:
                return CheckResult("batch_format", FAIL, f"{where}: {fault}")
            if count is None:
                shapes.setdefault(split, batch["input_ids"])
    for split in SPLITS:
        if split not in shapes:
            never = "train" if split == "train" else "validate"
            return CheckResult(
                "batch_format",
                FAIL,
                f"the {split} loader hands out no batch: its split is empty, or smaller than a batch with "
                f"drop_last=True; a run would never {never}",
            )
    shapes_read = ", ".join(f"{list(ids.shape)} ({split})" for split, ids in shapes.items())
    return CheckResult(
        "batch_format",
        PASS,
        f"batches of {shapes_read}: input_ids and targets {str(shapes['train'].dtype).removeprefix('torch.')}, "
        "loss_mask bool, [batch, time]",
    )


def first_out_of_range(batch: dict, vocab: int) -> tuple[str, int, int, int] | None:
    """(key, example, position, id) of the first id outside [0, vocab): any input id, a target inside the mask."""
    for key in ("input_ids", "targets"):
        ids = batch[key]
        bad = (ids < 0) | (ids >= vocab)
        if key == "targets":
            bad &= batch["loss_mask"]
        if bad.any():
            row, position = (int(i) for i in bad.nonzero()[0])
            return key, row, position, int(ids[row, position])
    return None


def ids_in_range(model, data, cfg=None) -> CheckResult:
    """Every id of the batches read (inputs, targets inside the loss mask) and every special id lies in [0,
    vocab_size)."""
    data = as_data_reads(data, cfg)
    vocab = vocab_size(data.tokenizer)
    if vocab is None or vocab < 1:
        return CheckResult(
            "ids_in_range", FAIL, f"the tokenizer's vocab_size is {vocab!r}: give a count >= 1"
        )
    specials = special_ids(data.tokenizer)
    for name, value in specials.items():
        if not 0 <= value < vocab:
            return CheckResult(
                "ids_in_range",
                FAIL,
                f"the tokenizer's {name} is {value}, outside its ids [0, {vocab}): vocab_size must count every "
                "token, the special ones too (vocab_size = the largest id + 1)",
            )
    read = read_batches(data)
    if not read:
        return CheckResult(
            "ids_in_range", SKIP, "not judged: no batch with the Batch layout (see batch_format)"
        )
    for split, b, batch in read:
        found = first_out_of_range(batch, vocab)
        if found is not None:
            key, row, position, value = found
            named = [name for name, v in specials.items() if v == value]
            if named:
                why = f"it is the tokenizer's {named[0]}: count it in vocab_size"
            elif value == -100:
                why = "-100 is Hugging Face's ignore index: leave that position out of loss_mask instead"
            elif value < 0:
                why = "a negative id is no token (a buffer changed in place? see static_batches)"
            else:
                why = "the ids come from another tokenizer, or a special token is added past the vocabulary"
            return CheckResult(
                "ids_in_range",
                FAIL,
                f"{split} batch {b}, key {key!r}, example {row}, position {position}: id {value} is outside the "
                f"tokenizer's {vocab} ids [0, {vocab}); {why}",
            )
    specials_read = ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in specials.items())
    return CheckResult(
        "ids_in_range",
        PASS,
        f"every id of {len(read)} batches (inputs, masked targets){' and the special ids (' + specials_read + ')' if specials_read else ''}"
        f" lies in [0, {vocab})",
    )


def _unusable_reason(batch, tokenizer) -> str | None:
    """Why no model check can judge a model on `batch` (a phrase naming the row that says more), or None."""
    # such a batch cannot run through a model, and an empty mask makes every loss 0/0: the model checks are
    # then SKIP rows that point at the data row instead of echoing the fault
    fault = layout_fault(batch)
    if fault is not None:
        return f"is not a Batch: {fault} (see batch_format)"
    vocab = vocab_size(tokenizer)
    found = first_out_of_range(batch, vocab) if vocab else None
    if found is not None:
        key, row, position, value = found
        return f"holds id {value} outside the vocabulary [0, {vocab}) ({key}, example {row}, position {position}; see ids_in_range)"
    if not bool(batch["loss_mask"].any()):
        return "has an empty loss mask: every loss is 0/0 (see loss_mask)"
    return None


def sample_rows(data, size: int = 4) -> SampleBatch:
    """The first `size` training examples, collated by the fork's own train loader's collate (padding and
    all), `unusable` set where the model checks cannot run on them."""
    rows = first_rows(data, "train", size)
    rows = dict(rows) if isinstance(rows, Mapping) else rows  # a BatchEncoding, a UserDict: as a dict
    batch = SampleBatch(rows if isinstance(rows, dict) else {})
    batch.unusable = (
        "holds no example: the training split is empty"
        if rows is None
        else _unusable_reason(rows, data.tokenizer)
    )
    return batch
