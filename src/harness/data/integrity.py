"""Whether a prepared corpus folder (harness.data.shards) is complete: `damage` names what is wrong
(meta.json's shape, a shard missing, of another length or failing its checksum), or None. A damaged one is
prepared again (harness.data.prepare_corpus), or refused where it cannot be written."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from harness.data.format import sha256_file
from harness.data.shards import FORMAT

DTYPES = {"uint16": 2, "uint32": 4}
#: the streams a folder may hold beside its tokens, one value a token (data=hf's fine-tuning: which tokens are
#: in the loss; where each example starts), each in shards of its own: name -> dtype, bytes a value
STREAMS = {"loss": ("uint8", 1), "starts": ("int64", 8)}
#: beside meta.json: each verified shard's size, inode, mtime and ctime with its digest, so a checksum is read
#: once per shard and file state (where the folder can be written; else the shards are read on every run)
STAMPS = ".verified.json"
SHARD_NAME = re.compile(r"shard-\d{5}\.bin")
HEX64 = re.compile(r"[0-9a-f]{64}")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _meta_fault(meta) -> str | None:
    """What is wrong with the shape of a parsed meta.json (the layout in harness.data.shards), or None."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return f"not a {FORMAT} meta.json"
    if meta.get("dtype") not in DTYPES or not _is_count(meta.get("tokens")):
        return "dtype must be uint16 or uint32, tokens a whole number"
    tokenizer = meta.get("tokenizer")
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("fingerprint"), str):
        return "tokenizer must hold its fingerprint"
    if not isinstance(tokenizer.get("alphabet"), (str, type(None))):
        return "tokenizer.alphabet must be text or null"
    splits, shards = meta.get("splits"), meta.get("shards")
    if not isinstance(splits, dict) or not {"train", "val"} <= set(splits):
        return "splits must hold train and val"
    for name in ("train", "val"):
        part = splits[name]
        if not isinstance(part, dict) or not (_is_count(part.get("start")) and _is_count(part.get("tokens"))):
            return f"splits.{name} must hold start and tokens, whole numbers"
        if part["start"] + part["tokens"] > meta["tokens"]:
            return f"splits.{name} reaches past the {meta['tokens']} tokens"
    if not isinstance(shards, list) or not all(
        isinstance(s, dict)
        and isinstance(s.get("file"), str)
        and SHARD_NAME.fullmatch(s["file"])
        and _is_count(s.get("tokens"))
        and isinstance(s.get("sha256"), str)
        and HEX64.fullmatch(s["sha256"])
        for s in shards
    ):
        return "shards must list {file: shard-NNNNN.bin, tokens, sha256}"
    if sum(s["tokens"] for s in shards) != meta["tokens"]:
        return "the shards' tokens do not add up to tokens"
    streams = meta.get("streams", {})
    if not isinstance(streams, dict) or not set(streams) <= set(STREAMS):
        return f"streams may hold {', '.join(STREAMS)}"
    for name, stream in streams.items():
        if not isinstance(stream, list) or not all(
            isinstance(s, dict)
            and re.fullmatch(rf"{name}-\d{{5}}\.bin", str(s.get("file")))
            and _is_count(s.get("tokens"))
            and HEX64.fullmatch(str(s.get("sha256")))
            for s in stream
        ):
            return f"streams.{name} must list {{file: {name}-NNNNN.bin, tokens, sha256}}"
    return None


def files(meta: dict) -> list[tuple[dict, int]]:
    """(shard, bytes a value) of every file a folder's meta.json lists: its token shards and its streams'."""
    listed = [(s, DTYPES[meta["dtype"]]) for s in meta["shards"]]
    return listed + [(s, STREAMS[n][1]) for n, stream in meta.get("streams", {}).items() for s in stream]


def read_meta(folder: Path) -> tuple[dict | None, str | None]:
    """(meta.json, None) when it is there and of the right shape, else (None, what is wrong)."""
    path = Path(folder) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no meta.json"
    except OSError as err:
        return None, f"meta.json cannot be read ({err.strerror or err})"
    except ValueError:  # not JSON, or not UTF-8
        return None, "meta.json is not JSON"
    wrong = _meta_fault(meta)
    return (None, f"meta.json: {wrong}") if wrong else (meta, None)


def _file_state(path: Path) -> list[int]:
    """What changes when a file's bytes (or its times) change: size, inode, mtime and ctime in nanoseconds."""
    info = path.stat()
    return [info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns]


def _read_stamps(folder: Path) -> dict:
    try:
        stamps = json.loads((Path(folder) / STAMPS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _write_stamps(folder: Path, stamps: dict) -> None:
    """`.verified.json`, replaced whole; nothing where the folder cannot be written (a read-only cache)."""
    try:
        handle, staging = tempfile.mkstemp(prefix=f"{STAMPS}.", dir=folder)
        with os.fdopen(handle, "w") as out:
            json.dump(stamps, out)
        os.replace(staging, Path(folder) / STAMPS)
    except OSError:
        return


def damage(folder: Path, meta: dict | None = None) -> str | None:
    """What is wrong with the prepared folder (meta.json's shape, a shard missing, of another length,
    unreadable or failing its checksum), or None when it is complete."""
    if meta is None:
        meta, wrong = read_meta(folder)
        if wrong:
            return wrong
    stamps, known = {}, _read_stamps(folder)
    for shard, width in files(meta):
        path = Path(folder) / shard["file"]
        try:
            now = _file_state(path)
            if now[0] != shard["tokens"] * width:
                return f"{shard['file']} holds {now[0]} bytes, meta.json says {shard['tokens']} tokens"
            # a state matching its stamp is verified: a write, or a change of its times, moves the ctime
            if known.get(shard["file"]) != [*now, shard["sha256"]] and sha256_file(path) != shard["sha256"]:
                return f"{shard['file']} fails its checksum (changed after it was written)"
        except FileNotFoundError:
            return f"{shard['file']} is missing"
        except OSError as err:
            return f"{shard['file']} cannot be read ({err.strerror or err})"
        stamps[shard["file"]] = [*now, shard["sha256"]]
    if stamps != known:
        _write_stamps(folder, stamps)
    return None


def stamp(folder: Path, meta: dict) -> None:
    """Record every shard of a folder just written as verified (its digests were computed as it was written)."""
    _write_stamps(
        folder, {s["file"]: [*_file_state(Path(folder) / s["file"]), s["sha256"]] for s, _ in files(meta)}
    )
