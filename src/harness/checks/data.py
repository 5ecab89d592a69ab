"""Checks of the data pipeline: round trip through the tokenizer, and static batches that stay static."""

from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from harness.checks.base import FAIL, PASS, WARN, CheckResult


def _reconstruct(tokenizer, item: dict, classify: bool) -> dict:
    """Decode a Batch row back to the source record it should have come from."""
    ids, targets, mask = item["input_ids"].tolist(), item["targets"], item["loss_mask"]
    if not classify:  # language modelling: targets are the text shifted by one. Decoded in one call: a
        # byte-level BPE may split one character across the last input and the last target
        return {"text": tokenizer.decode(ids + targets[-1:].tolist())}
    return {"text": tokenizer.decode(ids), "label": tokenizer.decode(targets[mask].tolist())}


def _in_order(loader: DataLoader) -> bool:
    """True when the loader yields its dataset in order, unshuffled (so row i of batch 0 is example i)."""
    batches = loader.batch_sampler
    if isinstance(batches, list):  # an explicit list of index batches (overfit mode)
        return all(b == list(range(b[0], b[0] + len(b))) for b in batches[:1])
    return isinstance(batches, BatchSampler) and isinstance(batches.sampler, SequentialSampler)


def data_roundtrip(model, data, cfg=None, examples: int = 8) -> CheckResult:
    """Decoding what the loader yields reproduces the source records (text, or tokens and label).

    Loaders that yield in order are read through; a shuffled one is read through its dataset."""
    checked = 0
    for split, loader in (("train", data.train_dataloader()), ("val", data.val_dataloader())):
        dataset = loader.dataset
        if not hasattr(dataset, "record"):
            return CheckResult(
                "data_roundtrip", WARN, f"the {split} dataset has no record(i): nothing to compare with"
            )
        first = next(iter(loader)) if _in_order(loader) else None
        for i in range(min(examples, len(dataset))):
            in_batch = first is not None and i < len(first["input_ids"])
            item = {k: v[i] for k, v in first.items()} if in_batch else dataset[i]
            want = dataset.record(i)
            got = _reconstruct(data.tokenizer, item, classify="label" in want)
            want = {k: want.get(k) for k in got}
            if got != want:
                return CheckResult(
                    "data_roundtrip",
                    FAIL,
                    f"{split} example {i}: the loader decodes to {got!r} "
                    f"but the source is {want!r}; check the encoding and the target shift",
                )
            checked += 1
    return CheckResult("data_roundtrip", PASS, f"{checked} examples decode back to their source")


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    return type(a) is type(b) and a == b


def _fixed_loaders(data) -> dict[str, DataLoader]:
    loaders = {"val": data.val_dataloader()}
    train = data.train_dataloader()
    if _in_order(train):
        loaders["train"] = train
    return loaders


def static_batches(
    model, data, cfg=None, batches: int = 3, allowed_to_vary: tuple[str, ...] = ()
) -> CheckResult:
    """Two passes over each fixed (unshuffled) loader give identical batches, key by key."""
    allowed = set(allowed_to_vary) | set((cfg or {}).get("static_batches_vary", None) or [])
    compared = 0
    for split, loader in _fixed_loaders(data).items():
        passes = []
        for _ in range(2):
            taken = []
            for i, batch in enumerate(loader):
                if i == batches:
                    break
                taken.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
            passes.append(taken)
        for i, (first, second) in enumerate(zip(*passes, strict=True)):
            for key in sorted(set(first) | set(second)):
                if key in allowed:
                    continue
                if key not in first or key not in second or not _same(first[key], second[key]):
                    a, b = first.get(key, "<missing>"), second.get(key, "<missing>")
                    return CheckResult(
                        "static_batches",
                        FAIL,
                        f"{split} loader, batch {i}, key {key!r} differs between two "
                        f"passes: {a!r} vs {b!r}; something mutates or re-randomizes batches "
                        "(allow a key to vary with static_batches_vary)",
                    )
            compared += 1
    return CheckResult("static_batches", PASS, f"{compared} batches identical over two passes, key by key")
