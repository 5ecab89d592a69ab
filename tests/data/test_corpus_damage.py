"""A damaged corpus cache is prepared again, or refused in one line where it cannot be: shards and meta.json
edited, a damaged BPE tokenizer, an unreadable file, a read-only root that holds a prepared corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.data import integrity
from tests.conftest import ROOT
from tests.data.conftest import BPE, datamodule, ready

# -- a damaged cache: prepared again, or refused where it cannot be -----------------------------------------------


def same_size_other_bytes(folder):
    shard = folder / "shard-00000.bin"
    data, times = bytearray(shard.read_bytes()), shard.stat()
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)  # zeros: ids inside the vocabulary
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(times.st_atime_ns, times.st_mtime_ns))  # its mtime put back: only its ctime tells


def meta_edit(**changes):
    def damage(folder):
        meta = json.loads((folder / "meta.json").read_text())
        meta.update(changes)
        (folder / "meta.json").write_text(json.dumps(meta))

    return damage


def shard_entry(**changes):
    def damage(folder):
        meta = json.loads((folder / "meta.json").read_text())
        meta["shards"][0].update(changes)
        (folder / "meta.json").write_text(json.dumps(meta))

    return damage


DAMAGES = {
    "shard_same_size_other_bytes": same_size_other_bytes,
    "shard_truncated": lambda f: (f / "shard-00000.bin").write_bytes(
        (f / "shard-00000.bin").read_bytes()[:-6]
    ),
    "shard_missing": lambda f: (f / "shard-00000.bin").unlink(),
    "meta_not_json": lambda f: (f / "meta.json").write_text('{"format": '),
    "meta_a_list": lambda f: (f / "meta.json").write_text("[1, 2]"),
    "meta_without_dtype": meta_edit(dtype=None),
    "meta_tokens_a_string": meta_edit(tokens="many"),
    "meta_without_splits": meta_edit(splits={"train": {"start": 0}}),
    "meta_shard_outside_the_folder": shard_entry(file="../../../../elsewhere.bin"),
    "meta_shard_checksum_not_hex": shard_entry(sha256="x" * 64),
    "meta_tokenizer_not_an_object": meta_edit(tokenizer="bpe"),
}


@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damaged_corpus_cache_is_prepared_again(name, corpus, tmp_path, caplog):
    """The synthetic cache's promise, kept by the corpus: whatever is damaged (a shard's bytes under its size, a
    meta.json of the wrong shape), the next run prepares it again and reads the corpus it is made from."""
    folder, _ = corpus
    first = ready(datamodule(folder, tmp_path / "data"))
    records = [first.train_dataset.record(i) for i in range(len(first.train_dataset))]
    DAMAGES[name](first.dataset_dir)
    with caplog.at_level("WARNING", logger="harness.data.prepare_corpus"):
        again = ready(datamodule(folder, tmp_path / "data"))
    assert "preparing it again" in caplog.text, caplog.text
    assert [again.train_dataset.record(i) for i in range(len(again.train_dataset))] == records
    assert integrity.damage(again.dataset_dir) is None


def test_a_damaged_bpe_tokenizer_is_trained_again(corpus, tmp_path, caplog):
    folder, _ = corpus
    first = ready(datamodule(folder, tmp_path / "data", BPE))
    (first.corpus.tokenizer_dir / "tokenizer.json").write_text('{"model": ')
    with caplog.at_level("WARNING", logger="harness.data.prepare_corpus"):
        again = ready(datamodule(folder, tmp_path / "data", BPE))
    assert "tokenizer.json" in caplog.text and again.tokenizer.fingerprint() == first.tokenizer.fingerprint()


def test_a_shard_is_read_for_its_checksum_once_per_state(corpus, tmp_path, monkeypatch):
    """Verifying need not read every shard on every run: once per shard and file state (a write, or its times
    changed, reads it again)."""
    folder, _ = corpus
    dm = ready(datamodule(folder, tmp_path / "data", val_fraction=0.3))
    read = []
    monkeypatch.setattr(integrity, "sha256_file", lambda path: read.append(path.name) or sha256_of(path))
    ready(datamodule(folder, tmp_path / "data", val_fraction=0.3))
    assert read == [], "the preparer recorded what it wrote: nothing to read again"
    os.utime(dm.dataset_dir / "shard-00000.bin")  # same bytes, its state changed
    ready(datamodule(folder, tmp_path / "data", val_fraction=0.3))
    ready(datamodule(folder, tmp_path / "data", val_fraction=0.3))
    assert read == ["shard-00000.bin"], read


def sha256_of(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def without_root_powers() -> None:
    """preexec_fn: a process started as root does not read or write past file permissions (the capabilities to
    bypass them dropped from what it may hold), so that a test of an unreadable file means the same as root."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP: fails, harmlessly, for a user without them


def prepare_cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.prepare",
            "data=corpus",
            "tokenizer=char",
            "data.length=16",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        preexec_fn=without_root_powers,
    )


def test_an_unreadable_file_of_the_corpus_is_one_line(corpus, tmp_path):
    folder, _ = corpus
    (folder / "locked.txt").write_text("secret\n")
    (folder / "locked.txt").chmod(0)
    result = prepare_cli(f"data.files={folder}", f"data.root={tmp_path / 'data'}", cwd=ROOT)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0] == (
        f"error: data.files={folder / 'locked.txt'}: cannot be read (Permission denied); make it readable "
        "(its permissions), or leave it out of data.files"
    ), lines


def test_a_read_only_root_holding_a_prepared_corpus_is_read_without_writing(corpus, tmp_path):
    folder, _ = corpus
    root = tmp_path / "data"
    prepared = ready(datamodule(folder, root, workers=1)).dataset_dir
    for path in (root, *root.rglob("*")):
        path.chmod(0o555 if path.is_dir() else 0o444)
    result = prepare_cli(f"data.files={folder}", f"data.root={root}", cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == str(prepared), result.stderr[-2000:]
    # damaged where it cannot be prepared again: refused in one line naming data.root
    prepared.chmod(0o755)
    (prepared / "meta.json").chmod(0o644)
    (prepared / "meta.json").write_text("[]")
    prepared.chmod(0o555)
    result = prepare_cli(f"data.files={folder}", f"data.root={root}", cwd=ROOT)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: data.root={root}: "), (
        result.stderr[-2000:]
    )
    assert "is damaged: meta.json: not a harness-corpus-1 meta.json" in lines[0] and "writable" in lines[0]
