"""The one dataset format on disk, written by every generator and read by every loader: a folder of meta.json
(format, task, alphabet, length, each split's examples and sha256, source) and train.jsonl, val.jsonl, one
record a line. Written atomically; a checksum per split catches truncation."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

FORMAT_VERSION = 1
#: lm: records {"text"} of length + 1 characters (the targets are the text shifted by one); classify: {"text",
#: "label"}, `length` characters then one label character, predicted at the last position
TASKS = ("classify", "lm")


class CorruptDataset(Exception):
    """The folder is not a whole dataset: a file is missing, truncated or altered."""


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_dataset(
    directory: Path, splits: dict[str, list[dict]], *, task: str, alphabet: str, length: int, source: dict
) -> Path:
    """Write `splits` (split name -> records) as a dataset folder at `directory`, atomically (a sibling
    renamed into place); a copy another process finished first is kept."""
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
            meta["splits"][name] = {"examples": len(records), "sha256": sha256_file(path)}
        (staging / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        try:
            os.rename(staging, directory)
        except OSError:
            if not (directory / "meta.json").exists():  # lost the race to nobody: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def excerpt(text: str, size: int = 40) -> str:
    """At most `size` characters of `text`, quoted, with its length when cut: what an error may quote of a file."""
    return repr(text) if len(text) <= size else f"{text[:size]!r}... ({len(text):,} characters)"


def _meta_fault(meta) -> str | None:
    """What is wrong with the shape of a parsed meta.json, or None."""
    if not isinstance(meta, dict):
        return f"holds a JSON {type(meta).__name__}, not an object"
    if meta.get("format") != FORMAT_VERSION or meta.get("task") not in TASKS:
        return f"format {excerpt(str(meta.get('format')))} / task {excerpt(str(meta.get('task')))} unknown"
    alphabet, length, splits = meta.get("alphabet"), meta.get("length"), meta.get("splits")
    if not isinstance(alphabet, str) or not alphabet or len(set(alphabet)) != len(alphabet):
        return "alphabet must be a non-empty string of distinct characters"
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return f"length must be a whole number >= 1, not {excerpt(repr(length))}"
    if not isinstance(splits, dict) or not {"train", "val"} <= set(splits):
        return "splits must map train and val to {examples, sha256}"
    for name, split in splits.items():
        examples = split.get("examples") if isinstance(split, dict) else None
        digest = split.get("sha256") if isinstance(split, dict) else None
        if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
            return f"splits.{excerpt(str(name))}.examples must be a whole number >= 0"
        if not isinstance(digest, str) or len(digest) != 64:
            return f"splits.{excerpt(str(name))}.sha256 must be a 64-character hex digest"
    return None


def read_meta(directory: Path) -> dict:
    """meta.json, every key's shape checked (else CorruptDataset): a cache of the wrong shape is regenerated,
    a folder of it refused."""
    path = Path(directory) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptDataset(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptDataset(f"{path}: not valid JSON ({excerpt(str(err), 80)})") from None
    wrong = _meta_fault(meta)
    if wrong is not None:
        raise CorruptDataset(f"{path}: {wrong}")
    return meta


def _line_limit(length: int) -> int:
    """The longest line a record of `length` characters can be: every character JSON-escaped (a surrogate
    pair, 12 bytes), the label and keys besides."""
    return 12 * (length + 2) + 1024


def _parse_record(raw: bytes, where: str, meta: dict) -> dict:
    """One line of a split as a record, every rule of the format checked; CorruptDataset names `where` (file
    and line) and quotes an excerpt."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptDataset(
            f"{where}: not UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start})"
        ) from None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorruptDataset(
            f"{where}: not JSON ({err.msg} at column {err.colno}): {excerpt(line)}"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise CorruptDataset(f'{where}: not a record with a "text" string: {excerpt(line)}')
    text, label = record["text"], record.get("label")
    if meta["task"] == "classify":
        if not isinstance(label, str) or len(label) != 1:
            raise CorruptDataset(
                f'{where}: "label" must be one character (task classify), not {excerpt(repr(label))}'
            )
        wanted = meta["length"]
    else:
        wanted = meta["length"] + 1  # lm: the next-token targets are the text shifted by one
    if len(text) != wanted:
        raise CorruptDataset(f"{where}: text of {len(text):,} characters, the examples hold {wanted}")
    unknown = next((c for c in text + (label or "") if c not in meta["alphabet"]), None)
    if unknown is not None:
        position = (text + (label or "")).index(unknown)
        raise CorruptDataset(
            f"{where}: character {unknown!r} at position {position} is outside meta.json's alphabet"
        )
    return record


def check_complete(directory: Path) -> dict:
    """meta.json, after checking its shape and every split's checksum; CorruptDataset says what is wrong."""
    meta = read_meta(directory)
    for split in meta["splits"]:
        path = Path(directory) / f"{split}.jsonl"
        if not path.exists():
            raise CorruptDataset(f"{path}: missing")
        if sha256_file(path) != meta["splits"][split]["sha256"]:
            raise CorruptDataset(f"{path}: checksum mismatch (truncated or edited after it was written)")
    return meta


def read_split(directory: Path, split: str, meta: dict | None = None) -> list[dict]:
    """The records of one split, checked against meta.json's checksum and, line by line, the format (UTF-8
    JSON, keys and types, length, alphabet)."""
    directory = Path(directory)
    meta = meta or read_meta(directory)
    path = directory / f"{split}.jsonl"
    expected = meta["splits"].get(split)
    if expected is None:
        raise CorruptDataset(f"{directory}: no split {split!r} in meta.json (has {sorted(meta['splits'])})")
    if not path.exists():
        raise CorruptDataset(f"{path}: missing")
    if sha256_file(path) != expected["sha256"]:
        raise CorruptDataset(f"{path}: checksum mismatch (truncated or edited after it was written)")
    limit, records = _line_limit(meta["length"]), []
    with open(path, "rb") as f:
        while raw := f.readline(limit + 1):
            where = f"{path} line {len(records) + 1}"
            if len(raw) > limit:
                raise CorruptDataset(
                    f"{where}: longer than {limit:,} bytes, more than a record of length {meta['length']} can be"
                )
            records.append(_parse_record(raw, where, meta))
    if len(records) != expected["examples"]:
        raise CorruptDataset(f"{path}: {len(records)} records, meta.json says {expected['examples']}")
    return records


def is_complete(directory: Path) -> bool:
    """True when `directory` holds a complete, uncorrupted dataset (meta.json's shape and checksums)."""
    try:
        check_complete(directory)
    except CorruptDataset:
        return False
    return True
