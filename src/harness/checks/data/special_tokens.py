"""`special_tokens`: on the batches every data check reads, the special tokens fine-tuning most often gets
wrong: a BOS doubled at a document's start, no end of text ever in the loss, an end of text missing from some
padded examples. A tokenizer declaring neither bos_id nor eos_id is not judged."""

from __future__ import annotations

from dataclasses import dataclass

from harness.checks.data.batch_format import layout_fault, pad_ids, read_batches, special_ids
from harness.checks.data.loss_mask import classifies, padded_targets
from harness.checks.data.reads import SPLITS, as_data_reads
from harness.checks.data.roundtrip_causes import decoded_or_none, time_major
from harness.checks.result import FAIL, PASS, SKIP, WARN, CheckResult

NAME = "special_tokens"
#: rows of each split's batches read that the check looks at, at most (a bounded sample, whatever the batch size)
ROWS = 64


@dataclass
class Example:
    """One row of a batch read, as lists: `where` names it ("train batch 0, example 3"); `end`, where its text
    ends (its last target in the loss that is no pad)."""

    where: str
    ids: list[int]
    targets: list[int]
    mask: list[bool]
    language: bool  # a language-modelling example: a classification one learns its label, not where it ends
    end: int
    packed: bool = False  # its batch declares document_ids: the row packs several, its end is no document's

    def text_start(self, pads: set[int]) -> int:
        """The first position that is not padding (left padding skipped)."""
        return next((t for t, i in enumerate(self.ids) if i not in pads), len(self.ids))

    def id_after_text(self) -> int | None:
        """The id that follows the text (from the inputs where that target is no id, -100); None where the
        text fills the row."""
        t = self.end + 1
        if t < len(self.targets) and self.targets[t] >= 0:
            return self.targets[t]
        return self.ids[t + 1] if t + 1 < len(self.ids) else None

    def text_length(self, pads: set[int]) -> int:
        """The tokens of its text: its inputs from the first real one to its end, and the last target."""
        return self.end - self.text_start(pads) + 2

    def is_padded(self, pads: set[int]) -> bool:
        """Whether the example is shorter than its row: something follows its text, or padding precedes it."""
        return self.end < len(self.ids) - 1 or (bool(self.ids) and self.ids[0] in pads)


def _text_end(targets: list[int], mask: list[bool], pads: set[int], eos: int | None) -> int:
    """The last position in the loss whose target is not padding (padded_targets); the last in the loss where
    all are."""
    kept, padding = [t for t, keep in enumerate(mask) if keep], set(padded_targets(targets, pads, eos))
    return max((t for t in kept if t not in padding), default=kept[-1])


def _loss_examples(data, pads: set[int], eos: int | None) -> list[Example]:
    """Every row with a position in the loss, of the batches read that keep the Batch layout (ROWS of each
    split at most)."""
    out, seen = [], dict.fromkeys(SPLITS, 0)
    for split, b, batch in read_batches(data):
        language, room = not classifies(data, split, batch), max(ROWS - seen[split], 0)
        seen[split] += min(room, len(batch["input_ids"]))
        rows = zip(*(batch[k][:room].tolist() for k in ("input_ids", "targets", "loss_mask")), strict=True)
        for r, (ids, targets, mask) in enumerate(rows):
            if any(mask):
                end = _text_end(targets, mask, pads, eos)
                where, packed = f"{split} batch {b}, example {r}", "document_ids" in batch
                out.append(Example(where, ids, targets, mask, language, end, packed))
    return out


def _time_major_batches(data) -> bool:
    """Whether a split's first batch, traced to its examples, is laid out [time, batch]."""
    traced = [data.indexed(split) for split in SPLITS]
    return any(
        isinstance(batch, dict) and layout_fault(batch) is None and time_major(batch, rows=len(indices))
        for batch, indices in filter(None, traced)
    )


def _eos_in_loss(read: list[Example], eos: int) -> int:
    """How many targets in the loss are the end of text."""
    return sum(keep and t == eos for e in read for t, keep in zip(e.targets, e.mask, strict=True))


def _doubled_bos(read: list[Example], bos: int, eos: int | None, pads: set[int]) -> str | None:
    """A FAIL's detail where a document begins with the BOS twice: at an example's first real position, or
    after an end of text in a packed row."""
    for example in read:
        ids = example.ids
        starts = {example.text_start(pads)} | {t + 1 for t, i in enumerate(ids) if i == eos}
        for s in sorted(starts):
            if s + 1 < len(ids) and ids[s] == ids[s + 1] == bos:
                return (
                    f"{example.where}, key 'input_ids', positions {s} and {s + 1}: both are the tokenizer's bos_id "
                    f"{bos}, the BOS added twice (by the tokenizer, and again by the text or its template); add it "
                    "once (encode with add_special_tokens=False where the text already holds it)"
                )
    return None


def _eos_masked(read: list[Example], eos: int, pads: set[int]) -> str | None:
    """A FAIL's detail where an end of text follows a text but none is a target in the loss anywhere: the
    model never learns to stop."""
    if _eos_in_loss(read, eos):
        return None
    closed = next((e for e in read if e.language and e.id_after_text() == eos), None)
    if closed is None:
        return None
    if eos in pads:
        cause = "the pad id is the eos id, and a mask of targets != pad_id drops each end of text with the padding"
    elif not pads:
        cause = "padding by the eos id (no pad id declared), masked by id, drops each end of text with it"
    else:
        cause = "the end of text is left out of the loss mask"
    return (
        f"{closed.where}, key 'loss_mask', position {closed.end + 1}: the end of text (eos_id {eos}) after the text "
        f"is out of the loss, as is every eos of the {len(read)} examples read: the model never learns to stop; "
        f"{cause}; keep the first eos after each text in the mask (mask from the lengths)"
    )


def _endings(
    read: list[Example], eos: int, pads: set[int]
) -> tuple[list[Example], list[Example], list[Example]]:
    """The padded language-modelling examples (each a document), those ending with the end of text, and those
    ending without it before the longest text read."""
    language = [e for e in read if e.language]
    longest = max((e.text_length(pads) for e in language), default=0)
    # the end of windows of a stream, or of documents cut at the length, is no end of their own: they fill
    # their row, or are as long as the longest text read (cut at the length, then padded to a round size)
    documents = [e for e in language if e.is_padded(pads) and not e.packed]
    ending = [e for e in documents if e.targets[e.end] == eos]
    missing = [e for e in documents if e.targets[e.end] != eos and e.text_length(pads) < longest]
    return documents, ending, missing


def _eos_missing(read: list[Example], eos: int, pads: set[int], tokenizer) -> CheckResult | None:
    """Padded examples without an end of text: a FAIL naming one where most end with it, a WARN where none
    does and no eos is in the loss; else None."""
    _, ending, missing = _endings(read, eos, pads)
    if not missing:
        return None
    if len(ending) > len(missing):
        example = missing[0]
        last = decoded_or_none(tokenizer, [example.targets[example.end]])
        return CheckResult(
            NAME,
            FAIL,
            f"{example.where}, key 'targets', position {example.end}: the example ends with {last!r}, no end of "
            f"text (eos_id {eos}), where {len(ending)} of the {len(ending) + len(missing)} padded examples read end "
            "with one; append the eos to every example, whichever path builds it",
        )
    if ending or _eos_in_loss(read, eos):
        return None
    paired = (
        " (the pad id is the eos id: a mask of targets != pad_id would drop it again)" if eos in pads else ""
    )
    return CheckResult(
        NAME,
        WARN,
        f"none of the {len(missing)} padded examples read ends with the end of text (eos_id {eos}), and no eos "
        f"is in the loss anywhere: if each is a document, the model never learns to stop; append the eos to each "
        f"and keep it in the loss mask{paired}",
    )


def _pass_detail(read: list[Example], specials: dict[str, int], pads: set[int]) -> str:
    """A PASS's detail: what was looked at."""
    bos, eos = specials.get("bos_id"), specials.get("eos_id")
    parts = []
    if bos is not None:
        alike = bos == eos or bos in pads
        parts.append("a doubled bos not judged (it is the eos or pad id too)" if alike else "no bos doubled")
    language = [e for e in read if e.language]
    if eos is not None and not language:
        parts.append("classification only: no end of text to learn")
    elif eos is not None:
        documents, ending, missing = _endings(read, eos, pads)
        cut = len(documents) - len(ending) - len(missing)
        ends = f"{len(ending)} of {len(documents)} padded ones end with eos" + (
            f" ({cut} cut)" if cut else ""
        )
        ends = ends if documents else "none padded (windows or cut texts)"
        parts.append(f"{ends}; {_eos_in_loss(read, eos)} eos targets in the loss")
    specials_read = ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in specials.items())
    return f"{len(read)} examples read ({specials_read}): " + "; ".join(parts)


def special_tokens(model, data, cfg=None) -> CheckResult:
    """Each example's special tokens where fine-tuning most often breaks them: the BOS added once, the end of
    text in the loss and at the end of every padded example where most have it."""
    data = as_data_reads(data, cfg)
    specials = special_ids(data.tokenizer)
    bos, eos = specials.get("bos_id"), specials.get("eos_id")
    if bos is None and eos is None:
        return CheckResult(NAME, PASS, "not judged: the tokenizer declares no bos_id and no eos_id")
    if not read_batches(data) or _time_major_batches(data):
        return CheckResult(NAME, SKIP, "not judged: the batches are not Batches (see batch_format)")
    pads = pad_ids(data.tokenizer)
    read = _loss_examples(data, pads, eos)
    if not read:
        return CheckResult(NAME, SKIP, "not judged: no example has a position in the loss (see loss_mask)")
    if bos is not None and bos != eos and bos not in pads:
        found = _doubled_bos(read, bos, eos, pads)
        if found is not None:
            return CheckResult(NAME, FAIL, found)
    if eos is not None:
        found = _eos_masked(read, eos, pads)
        if found is not None:
            return CheckResult(NAME, FAIL, found)
        missing = _eos_missing(read, eos, pads, data.tokenizer)
        if missing is not None:
            return missing
    return CheckResult(NAME, PASS, _pass_detail(read, specials, pads))
