"""The one dataset format on disk, written by every generator and read by every loader.

A dataset is a folder:

    meta.json     {"format": 1, "task": "classify" | "lm", "alphabet": str, "length": int,
                   "splits": {"train": {"examples": int, "sha256": str}, ...}, "source": {...}}
    train.jsonl   one record a line: {"text": str} (lm: length + 1 characters, the next-token targets
    val.jsonl     are the text shifted by one) or {"text": str, "label": str} (classify: `length`
                  characters, then one label character predicted at the last position)

Folders are written atomically (a temporary sibling, then one rename), so concurrent writers of the
same dataset never leave a partial one; a checksum per split catches truncation and corruption.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

FORMAT_VERSION = 1
TASKS = ("classify", "lm")


class CorruptDataset(Exception):
    """The folder is not a whole dataset: a file is missing, truncated or altered."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_dataset(
    directory: Path, splits: dict[str, list[dict]], *, task: str, alphabet: str, length: int, source: dict
) -> Path:
    """Write `splits` (split name -> records) as a dataset folder at `directory`, atomically.

    If another process finishes the same folder first, its copy is kept and ours is discarded."""
    assert task in TASKS, task
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        meta = {
            "format": FORMAT_VERSION,
            "task": task,
            "alphabet": alphabet,
            "length": length,
            "splits": {},
            "source": source,
        }
        for name, records in splits.items():
            path = staging / f"{name}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for record in records:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
            meta["splits"][name] = {"examples": len(records), "sha256": _sha256(path)}
        (staging / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        try:
            os.rename(staging, directory)
        except OSError:
            if not (directory / "meta.json").exists():  # lost the race to nobody: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def read_meta(directory: Path) -> dict:
    path = Path(directory) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptDataset(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptDataset(f"{path}: not valid JSON ({err})") from None
    if meta.get("format") != FORMAT_VERSION or meta.get("task") not in TASKS:
        raise CorruptDataset(f"{path}: format {meta.get('format')!r} / task {meta.get('task')!r} unknown")
    return meta


def read_split(directory: Path, split: str, meta: dict | None = None) -> list[dict]:
    """The records of one split, after checking them against the checksum in meta.json."""
    directory = Path(directory)
    meta = meta or read_meta(directory)
    path = directory / f"{split}.jsonl"
    expected = meta["splits"].get(split)
    if expected is None:
        raise CorruptDataset(f"{directory}: no split {split!r} in meta.json (has {sorted(meta['splits'])})")
    if not path.exists():
        raise CorruptDataset(f"{path}: missing")
    if _sha256(path) != expected["sha256"]:
        raise CorruptDataset(f"{path}: checksum mismatch (truncated or edited after it was written)")
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    if len(records) != expected["examples"]:
        raise CorruptDataset(f"{path}: {len(records)} records, meta.json says {expected['examples']}")
    return records


def is_whole(directory: Path) -> bool:
    """True when `directory` holds a complete, uncorrupted dataset."""
    try:
        meta = read_meta(directory)
        for split in meta["splits"]:
            read_split(directory, split, meta)
    except CorruptDataset:
        return False
    return True
