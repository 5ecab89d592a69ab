"""Checks of the batches a fork's loaders hand out, read through its own collate, sampler and workers: the Batch
contract's layout (`batch_format`), every id inside the tokenizer's vocabulary (`ids_in_range`), and what the
loss sees (`loss_mask`: not empty, no padding, a classification label where the whole input has been read).

A batch that breaks the first two cannot be run through a model at all, and an empty loss mask makes every loss
0/0: `unusable` says so, and the model checks are skipped with a pointer here instead of echoing it."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from harness.batches import first_items
from harness.checks.base import FAIL, PASS, WARN, CheckResult, shown
from harness.checks.reads import SPLITS, reads

KEYS = ("input_ids", "targets", "loss_mask")
#: the names a tokenizer's padding token goes by, where it declares no pad_id
PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>", "<PAD>", "<|padding|>")
#: a layout check collates this many items (another count where an item is this long: a square is ambiguous)
PROBE_ROWS = (3, 5)


def vocab_size(tokenizer) -> int | None:
    size = getattr(tokenizer, "vocab_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def special_ids(tokenizer) -> dict[str, int]:
    """The tokenizer's special ids it declares: bos_id, eos_id, pad_id (those that are not None)."""
    found = {}
    for name in ("bos_id", "eos_id", "pad_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            found[name] = value
    return found


def pad_ids(tokenizer) -> set[int]:
    """The padding ids a tokenizer declares: `pad_id` (docs/contracts.md), a Hugging Face `pad_token_id`, or a
    token its backend names like a pad."""
    found = {v for k, v in special_ids(tokenizer).items() if k == "pad_id"}
    hf = getattr(tokenizer, "pad_token_id", None)
    if isinstance(hf, int) and not isinstance(hf, bool):
        found.add(hf)
    backend = getattr(tokenizer, "backend", None)
    if backend is not None and hasattr(backend, "token_to_id"):
        found |= {i for i in map(backend.token_to_id, PAD_NAMES) if i is not None}
    return found


def layout_fault(batch, rows: int | None = None, length: int | None = None) -> str | None:
    """What breaks the Batch contract in `batch` (a phrase), or None. `rows`: how many examples it collates
    (a time-major batch shows them on its second axis); `length`: data.length, the most positions it may hold."""
    if not isinstance(batch, Mapping):
        return f"a {type(batch).__name__}, not a dict with keys {', '.join(KEYS)}"
    missing = [k for k in KEYS if k not in batch]
    if missing:
        return f"no key {', '.join(map(repr, missing))} (it has {', '.join(map(repr, batch))})"
    loose = [k for k in KEYS if not isinstance(batch[k], torch.Tensor)]
    if loose:
        return f"{loose[0]!r} is a {type(batch[loose[0]]).__name__}, not a tensor"
    ids, targets, mask = (batch[k] for k in KEYS)
    for key, tensor in (("input_ids", ids), ("targets", targets)):
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
            return f"{key!r} is {tensor.dtype}: token ids are integers (torch.long)"
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


def probe_rows(data, split: str) -> tuple[dict | None, int]:
    """A few of the split's first items collated by its loader's collate (a count unlike their length, so that a
    time-major layout shows), and that count."""
    from harness.batches import collate_of

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
    data = reads(data, cfg)
    shapes = {}
    for split in SPLITS:
        probe, rows = probe_rows(data, split)
        candidates = [(f"{split} examples 0-{rows - 1}, collated", probe, rows)] if probe is not None else []
        candidates += [(f"{split} batch {b}", batch, None) for b, batch in enumerate(data.batches(split))]
        for where, batch, count in candidates:
            fault = layout_fault(batch, rows=count, length=data.length)
            if fault is not None:
                return CheckResult("batch_format", FAIL, f"{where}: {fault}")
            if count is None:
                shapes.setdefault(split, batch["input_ids"])
    if "train" not in shapes:
        return CheckResult(
            "batch_format", FAIL, "the train loader hands out no batch at all: the split is empty"
        )
    told = ", ".join(f"{list(ids.shape)} ({split})" for split, ids in shapes.items())
    return CheckResult(
        "batch_format",
        PASS,
        f"batches of {told}: input_ids and targets {str(shapes['train'].dtype).removeprefix('torch.')}, "
        "loss_mask bool, [batch, time]",
    )


def out_of_range(batch: dict, vocab: int) -> tuple[str, int, int, int] | None:
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
    """Every id of the batches read (inputs, and targets inside the loss mask) and the tokenizer's special ids lie
    in [0, vocab_size): an embedding or a loss indexed outside it crashes, or on a GPU reads garbage."""
    data = reads(data, cfg)
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
    for split, b, batch in read:
        found = out_of_range(batch, vocab)
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
    told = ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in specials.items())
    return CheckResult(
        "ids_in_range",
        PASS,
        f"every id of {len(read)} batches (inputs, masked targets){' and the special ids (' + told + ')' if told else ''}"
        f" lies in [0, {vocab})",
    )


def span(positions: list[int]) -> str:
    """`positions` (sorted) as short text: 3, 5-9, 12."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return shown([str(a) if a == b else f"{a}-{b}" for a, b in runs], 4)


def trailing_run(row: list[int]) -> tuple[int, int]:
    """(id, length) of the run of one id that ends `row`."""
    last, count = row[-1], 0
    for value in reversed(row):
        if value != last:
            break
        count += 1
    return last, count


def padding_counted(batch: dict, pads: set[int], specials: set[int]) -> tuple[int, list[int], str] | None:
    """(example, positions, what) where the loss counts padding: a masked target that is a pad id, or a run of one
    special id (an end of text again and again) ending an example, counted: padding with eos_id."""
    targets, mask = batch["targets"].tolist(), batch["loss_mask"].tolist()
    for row, (ids, keep) in enumerate(zip(targets, mask, strict=True)):
        counted = [t for t, (i, k) in enumerate(zip(ids, keep, strict=True)) if k and i in pads]
        if counted:
            return row, counted, f"the pad id {ids[counted[0]]}"
    runs = []
    for row, (ids, keep) in enumerate(zip(targets, mask, strict=True)):
        value, length = trailing_run(ids)
        counted = [t for t in range(len(ids) - length, len(ids)) if keep[t]]
        if value in specials and length >= 2 and len(counted) >= 2:
            runs.append((row, counted, value))
    if len(runs) >= 2 or any(len(c) >= 4 for _, c, _ in runs):
        row, counted, value = runs[0]
        return row, counted, f"the special id {value} again and again (padding with the end-of-text id?)"
    return None


def padding_after(batch: dict, row: int, position: int, pads: set[int], specials: set[int]) -> bool:
    """Whether every input of example `row` after `position` is padding: a declared pad or special id, or one id
    that pads every example of the batch, whose examples end at different places."""
    ids = batch["input_ids"]
    after = ids[row, position + 1 :].tolist()
    if not after or set(after) <= pads | specials:
        return True
    if len(set(after)) != 1:
        return False
    value = after[0]
    mask = batch["loss_mask"]
    ends = [int(m.nonzero().max()) for m in mask if m.any()]
    same_everywhere = all(
        set(ids[r, e + 1 :].tolist()) <= {value} for r, e in enumerate(ends) if e < ids.shape[1]
    )
    return same_everywhere and len(set(ends)) > 1


def classifies(data, split: str, batch: dict) -> bool:
    """Whether `split` is classification: its records carry a label, or every example has one masked position."""
    source = data.record_source(split)
    if source is not None:
        try:
            return "label" in source.record(0)
        except Exception:  # a record the round trip reports; the mask tells instead
            pass
    counts = batch["loss_mask"].sum(dim=1)
    return batch["input_ids"].shape[1] > 1 and bool((counts == 1).all())


def loss_mask(model, data, cfg=None) -> CheckResult:
    """The loss sees what it should: some position of every batch; no padding; in classification one position an
    example, after the whole input has been read."""
    data = reads(data, cfg)
    read = read_batches(data)
    if not read:
        return CheckResult("loss_mask", WARN, "no batch with the Batch layout to read (see batch_format)")
    for split in SPLITS:
        batches = [batch for s, _, batch in read if s == split]
        if batches and not any(bool(batch["loss_mask"].any()) for batch in batches):
            return CheckResult(
                "loss_mask",
                FAIL,
                f"the loss mask is False at every position of the {len(batches)} {split} batches read: the loss "
                "is 0/0 (NaN) and nothing trains; loss_mask marks the positions whose target counts (every real "
                "position for language modelling, the label's for classification)",
            )
    pads, specials = pad_ids(data.tokenizer), set(special_ids(data.tokenizer).values())
    labelled, padded, empty = False, 0, []
    for split, b, batch in read:
        counted = padding_counted(batch, pads, specials)
        if counted is not None:
            row, positions, what = counted
            return CheckResult(
                "loss_mask",
                FAIL,
                f"{split} batch {b}, example {row}: the loss counts padding: the targets at positions "
                f"{span(positions)} are {what}; leave padding out of loss_mask (loss_mask = targets != pad_id)",
            )
        mask = batch["loss_mask"]
        padded += int((~mask).sum())
        empty += [(split, b, r) for r in (~mask.any(dim=1)).nonzero().flatten().tolist()]
        if classifies(data, split, batch):
            labelled = True
            fault = label_fault(batch, pads, specials)
            if fault is not None:
                return CheckResult("loss_mask", FAIL, f"{split} batch {b}, {fault}")
    if empty:
        split, b, _ = empty[0]
        rows = [r for s, bb, r in empty if (s, bb) == (split, b)]
        return CheckResult(
            "loss_mask",
            WARN,
            f"{split} batch {b}: examples {shown(rows)} have no position in the loss mask: they cost compute and "
            "teach nothing (an example of padding only?)",
        )
    kind = "one an example, the label's, after the whole input" if labelled else "language modelling"
    left = f"; {padded} positions left out" if padded and not labelled else ""
    return CheckResult(
        "loss_mask", PASS, f"every batch read has positions in the loss ({kind}{left}); no padding counted"
    )


def label_fault(batch: dict, pads: set[int], specials: set[int]) -> str | None:
    """What is wrong with where a classification batch puts its labels, or None."""
    mask, ids = batch["loss_mask"], batch["input_ids"]
    for row in range(mask.shape[0]):
        positions = mask[row].nonzero().flatten().tolist()
        if len(positions) > 1:
            return (
                f"example {row}: {len(positions)} positions in the loss mask ({span(positions)}), but a "
                "classification example has one: its label's, at the last position of the input"
            )
        if positions and not padding_after(batch, row, positions[0], pads, specials):
            read, total = positions[0] + 1, ids.shape[1] - sum(int(i in pads) for i in ids[row].tolist())
            return (
                f"example {row}: the label is predicted at position {positions[0]}, where a causal model has "
                f"read {read} of its {total} input tokens; put it at the last position (after the whole text), "
                "the only one in the mask"
            )
    return None


def unusable(batch, tokenizer) -> str | None:
    """Why no model check can judge a model on `batch` (a phrase naming the check that says more), or None."""
    fault = layout_fault(batch)
    if fault is not None:
        return f"is not a Batch: {fault} (see batch_format)"
    vocab = vocab_size(tokenizer)
    found = out_of_range(batch, vocab) if vocab else None
    if found is not None:
        key, row, position, value = found
        return f"holds id {value} outside the vocabulary [0, {vocab}) ({key}, example {row}, position {position}; see ids_in_range)"
    if not bool(batch["loss_mask"].any()):
        return "has an empty loss mask: every loss is 0/0 (see loss_mask)"
    return None
