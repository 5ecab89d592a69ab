"""data=corpus: `Corpus`, which files, tokenizer and folders a corpus of text files of any size has, without
torch (harness.data.prepare_corpus tokenizes it into shards once, under
data.root/corpus/<name>-<hash>/<tokenizer>/val<f>/); harness.data.sources.corpus_datamodule reads them as a datamodule.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import sys
import sysconfig
from pathlib import Path

from harness.config.groups.data import held_out_fraction
from harness.data.shards import UNREADABLE, NotText, parquet_file
from harness.data.tokenizer import END_OF_TEXT, CharTokenizer, HFTokenizer, load_hf, tokenizer_config
from harness.errors import ConfigError

log = logging.getLogger(__name__)

SUFFIXES = (".txt", ".md", ".py", ".jsonl", ".parquet")  # what a folder takes (and .gz of the text ones)
STDLIB_SKIP = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


def stdlib_files() -> list[Path]:
    """The running Python's own standard library source, its tests and installed packages left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return [p for p in sorted(root.rglob("*.py")) if not STDLIB_SKIP & set(p.relative_to(root).parts[:-1])]


def _resolve_files(files) -> list[Path]:
    """The corpus's files, in order, from a file, a folder, a glob, a list of those, or `stdlib`."""
    if files == "stdlib":
        return stdlib_files()
    entries = [files] if isinstance(files, str) else list(files or [])
    if not entries:
        raise ConfigError("data.files", files, "give a file, a folder, a glob or a list of them, or stdlib")
    found: dict[Path, None] = {}
    for entry in map(str, entries):
        path = Path(entry).expanduser()
        if any(c in entry for c in "*?["):
            matched = [Path(p) for p in sorted(glob.glob(str(path), recursive=True))]
            matched = [p for p in matched if p.is_file()]
            if not matched:
                raise ConfigError("data.files", entry, "the glob matches no file; check the pattern")
        elif path.is_dir():
            matched = _folder_files(path)
            if not matched:
                raise ConfigError(
                    "data.files", entry, f"the folder holds no {'/'.join(SUFFIXES)} (or .gz) file"
                )
        elif path.is_file():
            matched = [path]
        else:
            raise ConfigError(
                "data.files", entry, "no such file or folder; give a file, a folder or a glob, or stdlib"
            )
        found.update(dict.fromkeys(p.resolve() for p in matched))
    for path in found:
        _check_readable(path)
    return list(found)


def _check_readable(path: Path) -> None:
    """A ConfigError naming a file of the corpus that cannot be opened (its permissions), before any work."""
    try:
        open(path, "rb").close()
    except OSError as err:
        raise ConfigError(
            "data.files", str(path), f"cannot be read ({err.strerror or err}); {UNREADABLE}"
        ) from None


def _contributes(name: str) -> bool:
    """Whether a folder's file of this name is part of the corpus: a suffix of SUFFIXES, or .gz of a text one."""
    return name.removesuffix(".gz").endswith(SUFFIXES) and not name.endswith(".parquet.gz")


def _check_parquet(path: str, text_field: str) -> None:
    """A ConfigError naming a .parquet file of the corpus that pyarrow (or its absence) cannot read as text,
    before any work: only its footer is read."""
    try:
        parquet_file(path, text_field).close()
    except NotText as err:
        raise ConfigError("data.files", path, f"{err.reason}; {err.fix}") from None


def _folder_files(folder: Path) -> list[Path]:
    """The files of `folder` and its subfolders with a suffix the corpus reads, in order; a subfolder that
    cannot be listed is a ConfigError."""

    def refuse(err: OSError) -> None:
        raise ConfigError(
            "data.files", err.filename, f"cannot be listed ({err.strerror}); {UNREADABLE}"
        ) from None

    found = []
    for parent, _, names in os.walk(folder, onerror=refuse, followlinks=True):
        found += [Path(parent) / n for n in names if _contributes(n)]
    return sorted(p for p in found if p.is_file())


def _corpus_name(files) -> str:
    """A readable folder name for `files`: stdlib-py311, the file's or folder's name, the first name +N."""
    if files == "stdlib":
        return f"stdlib-py{sys.version_info.major}{sys.version_info.minor}"
    entries = [files] if isinstance(files, str) else list(files)
    first = Path(re.split(r"[*?\[]", str(entries[0]))[0].rstrip("/") or "files").name
    name = re.sub(r"[^\w.-]+", "_", first)[:40] + (f"+{len(entries) - 1}" if len(entries) > 1 else "")
    return name.strip("._") or "files"


def window_start(seed: int, index: int, span: int) -> int:
    """A place in [0, span) drawn from (seed, index) alone: splitmix64 of the pair."""
    z = (seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) % span


class Shards:
    """What a source prepared into token shards has (data=corpus's files, data=hf's dataset): the tokenizer
    config, the folders its tokenizer and shards go in (`tokenizer_dir`, `dataset_dir`), `length`, `seed`,
    `val_windows`; the subclass's `prepare()` makes them."""

    length: int
    root: Path
    tokenizer_cfg: dict
    tokenizer_dir: Path
    dataset_dir: Path
    seed: int
    val_windows: int | None

    def tokenizer_tag(self) -> str:
        """The tokenizer's folder name inside the corpus's: bpe4096, char, char-<alphabet>, hf-<path>."""
        cfg, kind = self.tokenizer_cfg, self.tokenizer_cfg["kind"]
        if kind == "bpe":
            return f"bpe{cfg['vocab_size']}"
        if kind == "char" and not cfg.get("alphabet"):
            return "char"
        what = (
            cfg["alphabet"]
            if kind == "char"
            else [str(Path(cfg["path"]).expanduser().resolve()), cfg.get("eos_token")]
        )
        return f"{kind}-{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:8]}"

    def trained_bpe(self) -> HFTokenizer:
        """tokenizer=bpe: the BPE trained on this corpus (harness.data.prepare_corpus trains it)."""
        text = (self.tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8")
        return HFTokenizer.from_str(text, bos=END_OF_TEXT, eos=END_OF_TEXT)

    def load_tokenizer(self, meta: dict) -> CharTokenizer | HFTokenizer:
        """The tokenizer of the config, checked against the one the shards were made with (its fingerprint)."""
        cfg = self.tokenizer_cfg
        if cfg["kind"] == "char":
            tokenizer = CharTokenizer(cfg.get("alphabet") or meta["tokenizer"]["alphabet"])
        elif cfg["kind"] == "hf":
            tokenizer = load_hf(cfg["path"], cfg.get("eos_token"))
        else:
            tokenizer = self.trained_bpe()
        made_with = meta["tokenizer"]["fingerprint"]
        if tokenizer.fingerprint() != made_with:
            key = {"char": "tokenizer.alphabet", "hf": "tokenizer.path", "bpe": "tokenizer.vocab_size"}[
                cfg["kind"]
            ]
            raise ConfigError(
                key,
                cfg.get(key.split(".")[1]),
                f"this tokenizer (fingerprint {tokenizer.fingerprint()[:12]}) is not the one the shards in "
                f"{self.dataset_dir} were made with ({made_with[:12]}); restore it, or delete that folder to prepare again",
            )
        return tokenizer

    def check_windows(self, meta: dict) -> None:
        """A ConfigError unless each split holds at least one window of length + 1 tokens."""
        for split, part in meta["splits"].items():
            if part["tokens"] < self.length + 1:
                raise ConfigError(
                    "data.length",
                    self.length,
                    f"the corpus holds {meta['tokens']} tokens, {part['tokens']} of them in the {split} split: fewer "
                    f"than one window of {self.length + 1}; use a shorter data.length, more files or another data.val_fraction",
                )


class Corpus(Shards):
    """A corpus as data=corpus's keys describe it: its files, the tokenizer config node (char, bpe or hf), and
    the folders its tokenizer and shards go in."""

    def __init__(
        self,
        length: int,
        files="stdlib",
        tokenizer=None,
        text_field: str = "text",
        val_fraction: float = 0.1,
        val_windows: int | None = 512,
        max_files: int | None = None,
        max_bytes: int | None = None,
        workers: int | None = None,
        seed: int = 0,
        root: str = "data",
    ):
        self.length, self.root = length, Path(root)
        held_out_fraction(val_fraction)
        for key, value in (
            ("val_windows", val_windows),
            ("max_files", max_files),
            ("max_bytes", max_bytes),
            ("workers", workers),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"data.{key}", value, "must be a whole number >= 1, or null")
        self.tokenizer_cfg = tokenizer_config(tokenizer if tokenizer is not None else {"kind": "char"})
        self.text_field, self.val_fraction, self.val_windows = text_field, val_fraction, val_windows
        self.workers, self.seed = workers or os.cpu_count() or 1, seed
        paths = _resolve_files(files)[: max_files or None]
        self.files, total = [], 0  # (path, bytes): whole files, in order, until they hold max_bytes
        for path in paths:
            if max_bytes and total >= max_bytes:
                break
            self.files.append((str(path), path.stat().st_size))
            total += self.files[-1][1]
        if not total:
            raise ConfigError("data.files", files, "the corpus is empty (0 bytes); give files that hold text")
        for path, _ in self.files:
            if path.endswith(".parquet"):
                _check_parquet(path, text_field)
        stamp = [(p, s, Path(p).stat().st_mtime_ns) for p, s in self.files] + [text_field]
        key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:10]
        # corpus/<name>-<hash of files, sizes, mtimes>/<tokenizer>/val<fraction>/: a trained BPE is reused
        self.corpus_dir = self.root / "corpus" / f"{_corpus_name(files)}-{key}"
        self.tokenizer_dir = self.corpus_dir / self.tokenizer_tag()
        self.dataset_dir = self.tokenizer_dir / f"val{val_fraction}"

    def prepare(self) -> Path:
        """Tokenize the corpus into shards once (harness.data.prepare_corpus); a later call finds them and returns."""
        from harness.data.prepare_corpus import prepare

        return prepare(self)


#: the data targets whose corpus is prepared without building a datamodule (no torch, no Lightning)
CORPUS_TARGETS = ("harness.data.CorpusDataModule", "harness.data.sources.corpus_datamodule.CorpusDataModule")


def corpus_of(node):
    """The Corpus a data config node describes (its keys less the loaders'), for data=corpus; else None."""
    from omegaconf import OmegaConf

    if node.get("_target_") not in CORPUS_TARGETS:
        return None
    keys = OmegaConf.to_container(node, resolve=True)
    for loader_key in ("_target_", "batch_size", "num_workers"):
        keys.pop(loader_key, None)
    return Corpus(**keys)
