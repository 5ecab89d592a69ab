"""Packed documents stay apart: `document_isolation`.

A batch may declare its documents (the Batch contract's optional `document_ids`: Long[b, time], one id per
position, the same id for the positions of one document). Where it does, changing the tokens of one document
must move no output of another in the same row, the way `causality` asks it of later positions: packing several
documents into one row is meant to cost nothing, and attention that crosses their boundaries trains each on text
it should never see. Where a batch declares none, nothing is claimed: attending across documents is ordinary
pretraining practice.

A model that masks by document often finds the boundaries from the tokens themselves (an end-of-text id); the
tokens at each document's first and last position are therefore left as they are, and the changed ones are
drawn from the documents' inner tokens, never from a boundary's. Axes: b batch, time positions."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks.model.dependence import judged, moved
from harness.checks.model.first_break import first_break, time_axis
from harness.checks.result import FAIL, PASS, CheckResult, shown

#: the documents changed in each row, the first ones that have a later document in it
SOURCES = 2


def spans(documents: torch.Tensor) -> list[tuple[int, int]]:
    """(first, last) position of each run of one document id in a row."""
    ids = documents.tolist()
    starts = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]]
    return [(start, end - 1) for start, end in zip(starts, starts[1:] + [len(ids)], strict=True)]


def _inner_change(ids: torch.Tensor, documents: torch.Tensor) -> list[tuple[int, int, int, torch.Tensor]]:
    """For each row with two documents or more: (row, first, last, the row's ids with the inner tokens of
    document [first, last] replaced), for its first SOURCES documents that have a later one."""
    bounds = {
        ids[row, t].item() for row in range(ids.shape[0]) for span in spans(documents[row]) for t in span
    }
    inner = sorted({v for v in ids.flatten().tolist()} - bounds)  # tokens that never mark a boundary
    if len(inner) < 2:
        return []
    changes = []
    for row in range(ids.shape[0]):
        for first, last in spans(documents[row])[:-1][:SOURCES]:
            if last - first < 2:
                continue  # no inner token to change
            other = ids.clone()
            for t in range(first + 1, last):
                value = ids[row, t].item()
                other[row, t] = inner[(inner.index(value) + 1) % len(inner)] if value in inner else inner[0]
            changes.append((row, first, last, other))
    return changes


def outside(row: int, first: int, last: int):
    """The region of every position of `row` but [first, last] (a trace region: see harness.checks.model.first_break)."""

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
            hit = moved(out[row], base[row], scale)
            any_moved = any_moved or bool(hit[first : last + 1].any())
            hit[first : last + 1] = False
            if hit.any():
                where = first_break(model, run, ids, other.to(ids.device), outside(row, first, last))
                others = sorted({documents[row, t].item() for t in hit.nonzero().flatten().tolist()})
                return CheckResult(
                    "document_isolation",
                    FAIL,
                    f"changing document {documents[row, first].item()} of example {row} (positions {first}-"
                    f"{last}) moves the outputs of document(s) {shown(others)} at positions "
                    f"{shown(hit.nonzero().flatten().tolist())}: attention crosses the documents the batch "
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

    return judged("document_isolation", judge, model, batch, cfg)
