"""Preparing a corpus (data=corpus): the tokenizer made from it, its files tokenized into shards, atomically
and under a lock. A run does it on first use (the datamodule's prepare_data); `python -m harness.cli.prepare`
does only this step; every later run and sweep job reuses the folder."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness.data import integrity, shards
from harness.data.tokenizer import CharTokenizer, HFTokenizer, load_hf, train_bpe
from harness.errors import ConfigError
from harness.signals import CalmStart, calm_worker

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _lock_held(path: Path):
    """Hold an exclusive lock on `path` (created if need be): one preparer at a time, the others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process preparing %s", path.with_suffix(""))
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _unusable_reason(data) -> str | None:
    """Why the prepared folder of `data` cannot be used as it is, or None: it is complete and, for
    tokenizer=bpe, its tokenizer.json reads."""
    if not data.dataset_dir.exists():
        return "is not prepared yet"
    if data.tokenizer_cfg["kind"] == "bpe":
        try:
            data.trained_bpe()
        except Exception:  # gone, damaged, not a tokenizer: trained again with the shards
            return "has lost its tokenizer.json, or it cannot be read"
    why = integrity.damage(data.dataset_dir)
    return None if why is None else f"is damaged: {why}"


@contextlib.contextmanager
def _root_must_be_writable(data, why: str):
    """Turn a folder that cannot be written (a read-only data.root) into one line naming data.root."""
    try:
        yield
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise ConfigError(
            "data.root",
            str(data.root),
            f"{data.dataset_dir} {why} and cannot be prepared there ({err.strerror}); give a writable "
            "data.root (e.g. data.root=data), or prepare it where it can be written",
        ) from None


def prepare(data, write=None) -> Path:
    """The prepared folder of `data` (a Corpus, or another Shards source with its own `write(data)`: data=hf),
    made unless a complete one is there (then read without writing); a damaged one is prepared again, a
    mistake in the files a ConfigError."""
    folder, why = data.dataset_dir, _unusable_reason(data)
    if why is None:  # read without writing anything: a read-only data.root works
        return folder
    with (
        _root_must_be_writable(data, why),
        _lock_held(data.corpus_dir.parent / f".{data.corpus_dir.name}.lock"),
    ):
        why = _unusable_reason(data)  # another process may have prepared it while this one waited
        if why is None:
            return folder
        for stale in folder.parent.glob(f".{folder.name}.*"):  # what a killed preparer left
            shutil.rmtree(stale, ignore_errors=True)
        if folder.exists():
            log.warning("%s %s: preparing it again", folder, why)
            shutil.rmtree(folder)
        if "tokenizer.json" in why:  # trained again (build_tokenizer reuses one that is there)
            (data.tokenizer_dir / "tokenizer.json").unlink(missing_ok=True)
        try:
            (write or _write_shards)(data)
        except shards.NotText as err:  # nothing that looks complete is left behind
            fix = err.fix or "convert it to UTF-8 (iconv -t UTF-8) or leave it out of data.files"
            raise ConfigError("data.files", err.path, f"{err.reason} at byte {err.offset}; {fix}") from None
    return folder


def _write_shards(data) -> None:
    """Tokenize `data`'s files into a temporary folder beside the final one, then rename it into place."""
    started, tasks = time.perf_counter(), shards.plan(data.files, data.workers)
    tokenizer = corpus_tokenizer(data, tasks)
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    with staged(data.dataset_dir) as staging:
        written = _run_tasks(
            shards.encode_task,
            tasks,
            data.workers,
            "tokenizing",
            spec=tokenizer.spec(),
            text_field=data.text_field,
            folder=str(staging),
            dtype=dtype,
        )
        total = sum(count for count, _ in written)
        held_out = round(total * data.val_fraction)
        meta = {
            "format": shards.FORMAT,
            "dtype": dtype,
            "tokens": total,
            "tokenizer": _tokenizer_meta(tokenizer, data.tokenizer_cfg),
            "splits": {
                "train": {"start": 0, "tokens": total - held_out},
                "val": {"start": total - held_out, "tokens": held_out},
            },
            "shards": [
                {"file": task.shard, "tokens": count, "sha256": digest}
                for task, (count, digest) in zip(tasks, written, strict=True)
            ],
            "source": {
                "files": len(data.files),
                "bytes": sum(s for _, s in data.files),
                "first": data.files[0][0],
            },
        }
        data.check_windows(meta)  # before the rename: a corpus too short for this length leaves nothing
        finish(staging, meta)
    folder = data.dataset_dir
    seconds, mb = time.perf_counter() - started, meta["source"]["bytes"] / 1e6
    log.info(
        "prepared %s: %d files, %.1f MB -> %d tokens in %.1f s", folder, len(data.files), mb, total, seconds
    )


@contextlib.contextmanager
def staged(folder: Path):
    """A temporary folder beside `folder`, renamed into its place when the block ends well (`finish` wrote its
    meta.json), removed in any case: a prepared folder is whole or absent."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        yield staging
        if (staging / "meta.json").exists():
            try:
                os.rename(staging, folder)
            except OSError:  # another preparer got there first (a filesystem where the lock does not hold)
                if integrity.damage(folder) is not None:
                    raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def finish(staging: Path, meta: dict) -> None:
    """meta.json written into `staging`, its shards stamped as verified (their digests were just computed)."""
    (staging / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    integrity.stamp(staging, meta)


def build_tokenizer(data, texts, alphabet) -> CharTokenizer | HFTokenizer:
    """The tokenizer the config asks for: char's alphabet read from the data (`alphabet()`, unless given), the
    BPE trained on `texts()` (unless its tokenizer.json is there), or yours."""
    cfg = data.tokenizer_cfg
    if cfg["kind"] == "hf":
        return load_hf(cfg["path"], cfg.get("eos_token"))
    if cfg["kind"] == "char":
        found, given = alphabet(), cfg.get("alphabet")
        unknown = "".join(sorted(set(found) - set(given or found)))
        if unknown:
            fix = "add them to tokenizer.alphabet, or set tokenizer.alphabet=null for the corpus's own"
            raise ConfigError("tokenizer.alphabet", given, f"the corpus holds {unknown!r} outside it; {fix}")
        return CharTokenizer(given or found)
    path = data.tokenizer_dir / "tokenizer.json"
    if not path.is_file():
        log.info("training a byte-level BPE of %d tokens on %s", cfg["vocab_size"], data.corpus_dir.name)
        trained = train_bpe(texts(), cfg["vocab_size"])
        if trained.vocab_size < cfg["vocab_size"]:  # the trainer stops where no pair is left to merge
            log.warning(
                "the corpus %s is too small for the BPE asked: tokenizer.vocab_size=%d asked, %d tokens got (no "
                "pair left to merge); give a larger corpus or a smaller tokenizer.vocab_size",
                data.corpus_dir.name,
                cfg["vocab_size"],
                trained.vocab_size,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        trained.save(path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)  # whole or absent
    return data.trained_bpe()


def corpus_tokenizer(data, tasks: list[shards.Task]) -> CharTokenizer | HFTokenizer:
    """build_tokenizer for a corpus of files: the BPE trained on its documents, the alphabet read from them
    in parallel."""

    def texts():
        return (t for task in tasks for t, _, _ in shards.documents(task.pieces, data.text_field))

    def alphabet() -> str:
        seen = _run_tasks(shards.scan_task, tasks, data.workers, "reading", text_field=data.text_field)
        return "".join(sorted(set("".join(chars for (chars,) in seen))))

    return build_tokenizer(data, texts=texts, alphabet=alphabet)


def _run_tasks(function, tasks: list[shards.Task], workers: int, desc: str, **kwargs) -> list:
    """`function(task, **kwargs)` of every task in order, on `workers` processes (or this one), with a
    progress bar by bytes; a worker's exception is raised here."""
    from tqdm import tqdm

    call = functools.partial(function, **kwargs)
    results = [None] * len(tasks)
    with tqdm(total=sum(t.size for t in tasks), desc=desc, unit="B", unit_scale=True, file=sys.stderr) as bar:
        if workers <= 1 or len(tasks) == 1:
            for task in tasks:
                results[task.index] = call(task)[1:]
                bar.update(task.size)
            return results
        # fork: the workers need nothing imported again (spawn would import Lightning in each). The signals are
        # this process's to act on: a worker started calm leaves them to it, and ends silently with the pool
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with CalmStart() as started:
            pool = multiprocessing.get_context(method).Pool(min(workers, len(tasks)), initializer=calm_worker)
        with pool:
            started.check()  # a signal while the workers started: now, with the pool there to be ended
            for index, *result in pool.imap_unordered(call, tasks):
                results[index] = result
                bar.update(tasks[index].size)
    return results


def _tokenizer_meta(tokenizer, config: dict) -> dict:
    """What meta.json records of the tokenizer made from `config` (the tokenizer node); `fingerprint` is what a
    later run's tokenizer must match."""
    return {
        "vocab_size": tokenizer.vocab_size,
        # a BPE's size asked: more than vocab_size where the corpus ran out of pairs to merge
        "vocab_size_asked": config.get("vocab_size"),
        "fingerprint": tokenizer.fingerprint(),
        "bos_id": tokenizer.bos_id,
        "eos_id": tokenizer.eos_id,
        "alphabet": getattr(tokenizer, "alphabet", None),
        "config": config,
    }
