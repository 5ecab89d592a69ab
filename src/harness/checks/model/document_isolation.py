"""`document_isolation`: where a batch declares its documents (`document_ids`), changing one document's inner
tokens moves no output of another in the same row. Each document's first and last tokens stay as they are.
Axes: b batch, time positions."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.model.dependence import judge_now_or_after_step, logits_moved
from harness.checks.model.first_break import first_break, time_axis
from harness.checks.result import FAIL, PASS, CheckResult, brief_list

#: the documents changed in each row, the first ones that have a later document in it
SOURCES = 2


def _document_spans(documents: torch.Tensor) -> list[tuple[int, int]]:
    """(first, last) position of each run of one document id in a row."""
    ids = documents.tolist()
    starts = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]]
    return [(start, end - 1) for start, end in zip(starts, starts[1:] + [len(ids)], strict=True)]


def _inner_change(ids: torch.Tensor, documents: torch.Tensor) -> list[tuple[int, int, int, torch.Tensor]]:
    """(row, first, last, the ids with document [first, last]'s inner tokens replaced) for the first SOURCES
    documents of each row that have a later one."""
    bounds = {
        ids[row, t].item()
        for row in range(ids.shape[0])
        for span in _document_spans(documents[row])
        for t in span
    }
    # a model that masks by document may find its boundaries from the tokens (an end-of-text id): changed
    # tokens are drawn from those that never mark a boundary
    inner = sorted({v for v in ids.flatten().tolist()} - bounds)
    if len(inner) < 2:
        return []
    changes = []
    for row in range(ids.shape[0]):
        for first, last in _document_spans(documents[row])[:-1][:SOURCES]:
            if last - first < 2:
                continue  # no inner token to change
            other = ids.clone()
            for t in range(first + 1, last):
                value = ids[row, t].item()
                other[row, t] = inner[(inner.index(value) + 1) % len(inner)] if value in inner else inner[0]
            changes.append((row, first, last, other))
    return changes


def _outside_region(row: int, first: int, last: int):
    """The region of every position of `row` but [first, last] (a region as first_break reads one)."""

    def region(x: torch.Tensor, batch: int, time: int):
        axis = time_axis(x.shape, batch, time)
        if axis is None:
            return None
        x = x[row].movedim(axis - 1, 0)
        return torch.cat([x[:first], x[last + 1 :]])

    return region


def document_isolation(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Where the batch declares its documents: changing one document's tokens moves no other document's outputs."""
    documents = batch.get("document_ids") if hasattr(batch, "get") else None
    if documents is None:
        return CheckResult(
            "document_isolation",
            PASS,
            "not judged: the batch declares no documents (document_ids); attending across packed documents is "
            "ordinary pretraining practice",
        )
    if not isinstance(documents, torch.Tensor) or documents.shape != batch["input_ids"].shape:
        return CheckResult(
            "document_isolation",
            FAIL,
            f"document_ids must be a tensor shaped as input_ids {tuple(batch['input_ids'].shape)}, one document "
            f"id per position; it is {getattr(documents, 'shape', type(documents).__name__)}",
        )
    changes = _inner_change(batch["input_ids"].cpu(), documents.cpu())
    if not changes:
        return CheckResult(
            "document_isolation", PASS, "not judged: no row holds two documents with an inner token to change"
        )

    def judge(model, ids, run, base):
        scale, any_moved = base.abs().amax().item(), False
        for row, first, last, other in changes:
            out = run(other.to(ids.device))
            hit = logits_moved(out[row], base[row], scale)
            any_moved = any_moved or bool(hit[first : last + 1].any())
            hit[first : last + 1] = False
            if hit.any():
                where = first_break(model, run, ids, other.to(ids.device), _outside_region(row, first, last))
                others = sorted({documents[row, t].item() for t in hit.nonzero().flatten().tolist()})
                return CheckResult(
                    "document_isolation",
                    FAIL,
                    f"changing document {documents[row, first].item()} of example {row} (positions {first}-"
                    f"{last}) moves the outputs of document(s) {brief_list(others)} at positions "
                    f"{brief_list(hit.nonzero().flatten().tolist())}: attention crosses the documents the batch "
                    "declares; mask it by document (a block-diagonal causal mask from document_ids or the "
                    f"end-of-text positions, varlen attention), or declare no document_ids; {where}",
                )
        if not any_moved:
            return None
        return CheckResult(
            "document_isolation",
            PASS,
            f"changing a document moves no other document's outputs ({len(changes)} documents changed)",
        )

    return judge_now_or_after_step("document_isolation", judge, model, batch, cfg)
