"""Why a batch row does not decode to its source: each cause in CAUSES is one function of the batch (targets
shifted, the label in the input, time-major, another vocabulary, another example's row); the first that fits
is the diagnosis. Padding is cut alike on both sides."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from harness.checks.data.batch_format import special_ids

#: the shifts of targets against inputs tried (1 is language modelling's)
SHIFTS = (0, 1, 2, 3, -1, -2)
#: the share of masked positions a relation must hold at to count as the batch's rule
RULE = 0.95


def quoted_excerpt(text: str, at: int = 0, size: int = 40) -> str:
    """At most `size` characters of `text` around position `at`, quoted, marked where cut."""
    start = max(0, min(at - size // 4, len(text) - size))
    cut = text[start : start + size]
    return ("..." if start else "") + repr(cut) + ("..." if start + size < len(text) else "")


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _without_padding(ids: list[int], pads: set[int], specials: set[int]) -> list[int]:
    """`ids` without the padding around them: pad ids at either end, and a run of one special id at the end
    cut to one."""
    start, end = 0, len(ids)
    while start < end and ids[start] in pads:
        start += 1
    while end > start and ids[end - 1] in pads:
        end -= 1
    while end - start >= 2 and ids[end - 1] in specials and ids[end - 2] == ids[end - 1]:
        end -= 1
    return ids[start:end]


@dataclass(frozen=True)
class Padding:
    """The padding around a text, as text: `marks` (pad ids' texts), `eos` (the end of text's, where the
    tokenizer pads with it), `joiner` (what decode puts between two of them)."""

    marks: tuple[str, ...] = ()
    eos: str | None = None
    joiner: str = ""

    def cut(self, text: str) -> str:
        """`text` without the padding around it, cut alike from a row and from its source."""
        lead = (*self.marks, self.eos) if self.eos else self.marks
        closing = self.eos + self.joiner + self.eos if self.eos else None
        while True:
            before = text
            for mark in lead:
                if text.startswith(mark):
                    text = text[len(mark) :].removeprefix(self.joiner)
            for mark in self.marks:
                if text.endswith(mark):
                    text = text[: -len(mark)].removesuffix(self.joiner)
            if closing and text.endswith(closing):
                text = text[: -len(self.joiner + self.eos)]
            if text == before:
                return text


def _joiner_of(tokenizer, token: int, text: str) -> str:
    """What `tokenizer` puts between two `token`s (whose text is `text`) when it decodes them: "" or whitespace."""
    twice = decoded_or_none(tokenizer, [token, token]) or ""
    between = twice[len(text) : len(twice) - len(text)]
    return between if twice.startswith(text) and twice.endswith(text) and between.isspace() else ""


def padding_of(tokenizer, pads: set[int]) -> Padding:
    """The padding `tokenizer` pads with, as text (`pads`: its pad ids)."""
    eos = special_ids(tokenizer).get("eos_id")
    texts = {i: decoded_or_none(tokenizer, [i]) for i in pads | ({eos} if eos is not None else set())}
    marks = tuple(sorted({texts[i] for i in pads if i != eos and texts[i]}, key=len, reverse=True))
    closing = texts.get(eos) if eos is not None and (eos in pads or not pads) else None
    token = next((i for i in pads if i != eos and texts[i]), eos if closing else None)
    joiner = _joiner_of(tokenizer, token, texts[token]) if token is not None else ""
    return Padding(marks, closing or None, joiner)


def is_classification(record, tokenizer) -> bool:
    """Whether a record is a classification example's: a `label` of one token (a longer one ends a
    language-modelling text)."""
    label = record.get("label") if hasattr(record, "get") else None
    try:
        return isinstance(label, str) and len(tokenizer.encode(label)) == 1
    except Exception:  # a label the tokenizer cannot encode: not a token of it
        return False


def decoded_or_none(tokenizer, ids: list[int]) -> str | None:
    """`ids` decoded, or None where the tokenizer refuses them (an id it does not know)."""
    try:
        return tokenizer.decode(ids)
    except Exception:  # a fork's decode may raise anything on an id it has no token for
        return None


def readings(row: dict, tokenizer, classify: bool, pads: set[int], specials: set[int]) -> list[dict]:
    """The records `row` may stand for (each also without padding, and without special ids): its inputs to the
    last masked position, then the target(s) there as text or label."""
    ids, targets, mask = (row[k].tolist() for k in ("input_ids", "targets", "loss_mask"))
    masked = [t for t, keep in enumerate(mask) if keep]  # a target outside the mask is never read (-100, say)
    end = masked[-1] + 1 if masked else len(ids)
    if classify:
        texts = [ids[:end], ids]
        extra = {"label": decoded_or_none(tokenizer, [targets[t] for t in masked])}
    else:
        texts = [ids[:end] + [targets[end - 1]]] if masked else [ids]
        extra = {}
    texts += [_without_padding(text, pads, specials) for text in texts]
    texts += [[i for i in text if i not in pads | specials] for text in texts]
    seen, out = set(), []
    for text in texts:
        key, words = tuple(text), decoded_or_none(tokenizer, text)
        if key not in seen and words is not None:
            seen.add(key)
            out.append({"text": words, **extra})
    return out


def sources(record: dict, tokenizer, classify: bool) -> list[dict]:
    """The record as written and as the tokenizer gives it back (decode(encode(text))); in language modelling
    a `label` ends the text."""
    if classify:
        want = {"text": record.get("text"), "label": record.get("label")}
    else:
        want = {"text": record.get("text", "") + (record.get("label") or "")}
    out = [want]
    with contextlib.suppress(Exception):  # a source the tokenizer cannot encode: only the record as written
        out.append(
            {k: tokenizer.decode(tokenizer.encode(v)) if isinstance(v, str) else v for k, v in want.items()}
        )
    return out


def unpadded_text(record: dict, padding: Padding) -> dict:
    """`record` (a reading or a source) with the padding around its text cut away."""
    text = record.get("text")
    return {**record, "text": padding.cut(text)} if isinstance(text, str) else record


def agrees(row: dict, record: dict, tokenizer, classify: bool, pads: set[int], specials: set[int]) -> bool:
    """Whether `row` decodes to `record`, the padding around each text treated alike on both sides."""
    padding = padding_of(tokenizer, pads)
    wanted = [unpadded_text(s, padding) for s in sources(record, tokenizer, classify)]
    return any(
        unpadded_text(got, padding) in wanted for got in readings(row, tokenizer, classify, pads, specials)
    )


def _mask_short(batch: dict, row: int, records: list, tokenizer, classify: bool, pads, **_) -> str | None:
    """Language modelling whose loss mask stops before the example ends: its last targets never learned."""
    record = records[row]
    if classify or record is None:
        return None
    ids, targets, mask = (batch[k][row].tolist() for k in ("input_ids", "targets", "loss_mask"))
    masked = [t for t, keep in enumerate(mask) if keep]
    if not masked:
        return None
    padding = padding_of(tokenizer, pads)
    end, wanted = masked[-1] + 1, {padding.cut(s["text"]) for s in sources(record, tokenizer, False)}
    for k in (1, 2):
        tail = targets[end : end + k]
        if any(i < 0 for i in tail):  # no id there (-100): the inputs hold the same tokens one position on
            tail = ids[end + 1 : end + 1 + k]
        longer = (
            decoded_or_none(tokenizer, ids[:end] + targets[end - 1 : end] + tail) if len(tail) == k else None
        )
        if longer is not None and padding.cut(longer) in wanted:
            return (
                f"the loss mask ends {k} position{'s' * (k > 1)} before the example does: its last target "
                f"{decoded_or_none(tokenizer, tail)!r} is never learned (the end of text left out of the mask?); mask every "
                "real target"
            )
    return None


def _shift_of(batch: dict) -> int | None:
    """The k for which targets[t] == input_ids[t + k] at (nearly) every masked position of the batch, or None."""
    ids, targets, mask = batch["input_ids"], batch["targets"], batch["loss_mask"]
    time = ids.shape[1]
    for k in SHIFTS:
        lo, hi = max(0, -k), min(time, time - k)
        if hi - lo < 2:
            continue
        where = mask[:, lo:hi]
        count = int(where.sum())
        if count >= 3 and int(((targets[:, lo:hi] == ids[:, lo + k : hi + k]) & where).sum()) >= RULE * count:
            return k
    return None


def _shifted_targets(batch: dict, classify: bool, **_) -> str | None:
    """Language modelling whose targets are not the inputs shifted by one."""
    if classify:
        return None
    k = _shift_of(batch)
    if k == 0:
        return (
            "the targets are the inputs themselves (no shift): the model learns to copy its input; targets are "
            "the text shifted by one (input_ids = text[:-1], targets = text[1:])"
        )
    if k is not None and k != 1:
        where = f"shifted by {k}" if k > 0 else f"behind the inputs by {-k}"
        return f"the targets are the inputs {where} instead of by one (input_ids = text[:-1], targets = text[1:])"
    return None


def _label_inside(batch: dict, classify: bool, **_) -> str | None:
    """Classification whose input holds the label at the position it is predicted from."""
    if not classify:
        return None
    ids, targets, mask = batch["input_ids"], batch["targets"], batch["loss_mask"]
    if int(mask.sum()) and bool((ids[mask] == targets[mask]).all()):
        position = int(mask[0].nonzero().max()) if mask[0].any() else "?"
        return (
            f"the label is inside the input: input_ids at position {position} already hold the label the model must "
            "predict there; the input is the text alone (text[:length]), the label only a target"
        )
    return None


def time_major(batch: dict, rows: int, **_) -> str | None:
    """A batch laid out [time, batch]."""
    ids = batch["input_ids"]
    if ids.dim() == 2 and ids.shape[1] == rows != ids.shape[0]:
        return f"the batch is laid out time-major ({list(ids.shape)} for {rows} examples; see batch_format)"
    return None


def _other_vocabulary(batch: dict, records: list[dict | None], tokenizer, classify: bool, **_) -> str | None:
    """Ids that stand one-to-one, position by position, for the source's tokens through a map other than the
    tokenizer's: another vocabulary (or order)."""
    mapping: dict[int, int] = {}
    for r, record in enumerate(records):
        if record is None:
            continue
        try:
            src = tokenizer.encode(record.get("text", "") + (record.get("label") or "" if classify else ""))
        except Exception:
            return None
        ids, keep = batch["input_ids"][r].tolist(), batch["loss_mask"][r]
        if not bool(keep.any()):
            return None
        got = ids + (batch["targets"][r][keep].tolist() if classify else [int(batch["targets"][r][keep][-1])])
        if len(got) != len(src):
            return None
        for a, b in zip(src, got, strict=True):
            if mapping.setdefault(a, b) != b:
                return None
    if not mapping or all(a == b for a, b in mapping.items()) or len(set(mapping.values())) != len(mapping):
        return None
    a, b = next((a, b) for a, b in mapping.items() if a != b)
    return (
        f"the ids follow another vocabulary than the tokenizer's: the source's {tokenizer.decode([a])!r} (id {a}) "
        f"is id {b} in the batch, which decodes to {tokenizer.decode([b])!r}; encode and decode with one tokenizer"
    )


def _one_example(batch: dict, **_) -> str | None:
    """A batch whose rows are all one example."""
    ids = batch["input_ids"]
    if (
        ids.shape[0] > 1
        and bool((ids == ids[:1]).all())
        and bool((batch["targets"] == batch["targets"][:1]).all())
    ):
        return (
            f"all {ids.shape[0]} rows of the batch are one and the same example: the dataset's __getitem__ ignores "
            "its index (see train_loader)"
        )
    return None


def _other_example(
    batch: dict, row: int, index: int, lookup: Callable, tokenizer, classify: bool, pads, specials, **_
) -> str | None:
    """A row that holds another example's source: record(i) and item i disagree about their order."""
    one = {k: batch[k][row] for k in ("input_ids", "targets", "loss_mask")}
    for j in sorted(range(max(0, index - 8), index + 9), key=lambda j: abs(j - index)):
        record = lookup(j) if j != index else None
        if record is not None and agrees(one, record, tokenizer, classify, pads, specials):
            return f"the row is example {j}'s source, not example {index}'s: record(i) and item i are out of step"
    return None


#: the causes tried, in order: the first that fits is the diagnosis
CAUSES = (
    time_major,
    _one_example,
    _label_inside,
    _shifted_targets,
    _mask_short,
    _other_vocabulary,
    _other_example,
)


def diagnose(batch: dict, row: int, index: int, records: list, lookup: Callable, **context) -> str:
    """The known cause that fits row `row` (example `index`) of `batch`, or ""; `lookup(j)`: record j or None;
    `context`: tokenizer, classify, pads, specials, rows."""
    for cause in CAUSES:
        found = cause(batch=batch, row=row, index=index, records=records, lookup=lookup, **context)
        if found:
            return found
    return ""


def quoted_difference(got: dict, want: dict) -> str:
    """Where a decoded row and its source first differ, both quoted near there."""
    key = "label" if got.get("text") == want.get("text") and "label" in want else "text"
    a, b = str(got.get(key)), str(want.get(key))
    at = _first_difference(a, b)
    return f"its {key} decodes to {quoted_excerpt(a, at)} but the source is {quoted_excerpt(b, at)} (first difference at character {at})"
