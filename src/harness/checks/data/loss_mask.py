"""`loss_mask`: the loss sees some position of every batch, no padding, and in classification one position an
example, after the whole input. Padding is a declared pad id, or the end-of-text id repeated at an example's
end (the first end of text after a text is a real target)."""

from __future__ import annotations

from harness.checks.data.batch_format import pad_ids, read_batches, special_ids
from harness.checks.data.reads import SPLITS, as_data_reads
from harness.checks.data.roundtrip_causes import is_classification
from harness.checks.result import FAIL, PASS, SKIP, WARN, CheckResult, brief_list


def _positions_text(positions: list[int]) -> str:
    """`positions` (sorted) as short text: 3, 5-9, 12."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return brief_list([str(a) if a == b else f"{a}-{b}" for a, b in runs], 4)


def _trailing_run(row: list[int]) -> tuple[int, int]:
    """(id, length) of the run of one id that ends `row`."""
    last, count = row[-1], 0
    for value in reversed(row):
        if value != last:
            break
        count += 1
    return last, count


def padded_targets(row: list[int], pads: set[int], eos: int | None) -> list[int]:
    """The positions of a row of targets that are padding: a pad id, but not the end-of-text id that closes
    the text (the first of its run)."""
    return [t for t, i in enumerate(row) if i in pads and not (i == eos and (t == 0 or row[t - 1] != i))]


def _one_past_the_text(counted: dict[int, list[int]], targets: list[list[int]], pads: set[int], eos) -> bool:
    """Whether each example that counts padding counts only its first pad after the text: a mask built on the
    inputs' positions."""
    return all(
        len(positions) == 1 and positions[0] == min(padded_targets(targets[row], pads, eos))
        for row, positions in counted.items()
    )


def _eos_padding(batches: list[dict], batch: dict, specials: set[int]) -> tuple[int, list[int], int] | None:
    """(example, positions, id) where one special id repeated ends several examples of `batch` in the loss;
    None where the data holds such runs elsewhere."""
    targets, mask = batch["targets"].tolist(), batch["loss_mask"].tolist()
    runs = []
    for row, (ids, keep) in enumerate(zip(targets, mask, strict=True)):
        value, length = _trailing_run(ids)
        counted = [t for t in range(len(ids) - length, len(ids)) if keep[t]]
        if value in specials and length >= 2 and len(counted) >= 2:
            runs.append((row, counted, value))
    if len(runs) < 2:
        return None
    value = runs[0][2]
    for ids in (row for b in batches for row in b["targets"].tolist()):
        # the same id twice in a row before the end: the data's own
        body = ids[: len(ids) - _trailing_run(ids)[1]]
        if any(a == b == value for a, b in zip(body, body[1:], strict=False)):
            return None
    return runs[0]


def _padding_counted(
    batches: list[dict], batch: dict, pads: set[int], specials: set[int], eos: int | None
) -> str | None:
    """Where the loss counts padding in `batch`, and the fix that fits the pattern; None where it counts none."""
    targets, mask = batch["targets"].tolist(), batch["loss_mask"].tolist()
    counted = {
        row: [t for t in padded_targets(ids, pads, eos) if keep[t]]
        for row, (ids, keep) in enumerate(zip(targets, mask, strict=True))
    }
    counted = {row: positions for row, positions in counted.items() if positions}
    if counted:
        row, positions = next(iter(counted.items()))
        if _one_past_the_text(counted, targets, pads, eos):
            fix = (
                "the mask reaches one position past each text: it is built on the inputs' positions (input_ids != "
                "pad_id) where the targets' are meant (targets != pad_id, or the input mask shifted by one)"
            )
        elif eos in pads:
            fix = (
                "the pad id is the end-of-text id: count the end of text that closes each text, leave out the "
                "padding after it (the attention mask shifted by one)"
            )
        else:
            fix = "leave the padding out of loss_mask (mask the positions whose target is padding)"
        return f"example {row}: the loss counts padding: the targets at positions {_positions_text(positions)} are the pad id {targets[row][positions[0]]}; {fix}"
    found = _eos_padding(batches, batch, specials)
    if found is not None:
        row, positions, value = found
        return (
            f"example {row}: the loss counts padding: the targets at positions {_positions_text(positions)} are the special id "
            f"{value} again and again (padding with the end-of-text id?); leave all but the first out of loss_mask"
        )
    return None


def _real_tokens(ids: list[int], pads: set[int]) -> list[int]:
    """The positions of `ids` that are not padding (a declared pad id)."""
    return [t for t, i in enumerate(ids) if i not in pads]


def _padding_after(batch: dict, row: int, position: int, pads: set[int], specials: set[int]) -> bool:
    """Whether every input of example `row` after `position` is padding: a pad or special id, or one id that
    pads every example (their ends differ)."""
    ids = batch["input_ids"]
    after = ids[row, position + 1 :].tolist()
    if not after or set(after) <= pads | specials:
        return True
    if len(set(after)) != 1:
        return False
    value = after[0]
    ends = [int(m.nonzero().max()) for m in batch["loss_mask"] if m.any()]
    same_everywhere = all(set(ids[r, e + 1 :].tolist()) <= {value} for r, e in enumerate(ends))
    return same_everywhere and len(set(ends)) > 1


def classifies(data, split: str, batch: dict) -> bool:
    """Whether `split` is classification: its records' label is one token, or (without records) every example
    has one masked position."""
    source = data.record_source(split)
    if source is not None:
        try:
            return is_classification(source.record(0), data.tokenizer)
        except Exception:  # a record the round trip reports; the mask tells instead
            pass
    counts = batch["loss_mask"].sum(dim=1)
    return batch["input_ids"].shape[1] > 1 and bool((counts == 1).all())


def _label_fault(batch: dict, pads: set[int], specials: set[int]) -> str | None:
    """What is wrong with where a classification batch puts its labels, or None."""
    mask, ids = batch["loss_mask"], batch["input_ids"]
    for row in range(mask.shape[0]):
        positions = mask[row].nonzero().flatten().tolist()
        if len(positions) > 1:
            return (
                f"example {row}: {len(positions)} positions in the loss mask ({_positions_text(positions)}), but a "
                "classification example has one: its label's, at the last position of the input"
            )
        if positions and not _padding_after(batch, row, positions[0], pads, specials):
            real = _real_tokens(ids[row].tolist(), pads)
            read = sum(t <= positions[0] for t in real)
            left = (
                " (the padding is on the left: the label goes at the last position)"
                if real and real[0] > 0
                else ""
            )
            return (
                f"example {row}: the label is predicted at position {positions[0]}, where a causal model has "
                f"read {read} of its {len(real)} input tokens{left}; put it where the whole text has been read, "
                "the only position in the mask"
            )
    return None


def loss_mask(model, data, cfg=None) -> CheckResult:
    """The loss sees what it should: some position of every batch; no padding; in classification one position an
    example, after the whole input has been read."""
    data = as_data_reads(data, cfg)
    read = read_batches(data)
    if not read:
        return CheckResult("loss_mask", SKIP, "not judged: no batch with the Batch layout (see batch_format)")
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
    eos = special_ids(data.tokenizer).get("eos_id")
    labelled, padded, empty = False, 0, []
    every = [batch for _, _, batch in read]
    for split, b, batch in read:
        counted = _padding_counted(every, batch, pads, specials, eos)
        if counted is not None:
            return CheckResult("loss_mask", FAIL, f"{split} batch {b}, {counted}")
        mask = batch["loss_mask"]
        padded += int((~mask).sum())
        empty += [(split, b, r) for r in (~mask.any(dim=1)).nonzero().flatten().tolist()]
        if classifies(data, split, batch):
            labelled = True
            fault = _label_fault(batch, pads, specials)
            if fault is not None:
                return CheckResult("loss_mask", FAIL, f"{split} batch {b}, {fault}")
    if empty:
        split, b, _ = empty[0]
        rows = [r for s, bb, r in empty if (s, bb) == (split, b)]
        return CheckResult(
            "loss_mask",
            WARN,
            f"{split} batch {b}: examples {brief_list(rows)} have no position in the loss mask: they cost compute and "
            "teach nothing (an example of padding only?)",
        )
    kind = "one an example, the label's, after the whole input" if labelled else "language modelling"
    left = f"; {padded} positions left out" if padded and not labelled else ""
    return CheckResult(
        "loss_mask", PASS, f"every batch read has positions in the loss ({kind}{left}); no padding counted"
    )
