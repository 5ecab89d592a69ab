"""data=hf: any Hugging Face `datasets` dataset, a name (offline: from its cache), a folder written by
`save_to_disk`, or files (.parquet, .jsonl/.json, .csv, .arrow, globs) read by datasets' own builders; for
language modelling (`text_field`) or fine-tuning (`prompt_field` + `response_field`, or `messages_field`).
Tokenized once with datasets' `map` into the token shards data=corpus uses (harness.data.shards), under
data.root/hf/<name>-<hash>/<tokenizer>/tokens/; fine-tuning adds the streams `loss` (which tokens are learned)
and `starts` (where each example begins)."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from harness.config.groups.data import held_out_fraction, tuning_fields
from harness.data import shards
from harness.data.sources.corpus import Shards
from harness.data.sources.finetune import chat_renderer, encode_example, message_pieces, pair_pieces
from harness.data.tokenizer import tokenizer_config
from harness.errors import ConfigError

log = logging.getLogger(__name__)

#: a file's suffix -> the datasets builder that reads it
BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}
#: a dataset's own held-out split, where data.val_split is null, in order of preference
VAL_SPLITS = ("validation", "valid", "val", "test")
#: what a folder written by save_to_disk holds
SAVED = ("dataset_info.json", "state.json", "dataset_dict.json")
LOCAL = "local files (a .parquet, .jsonl, .csv or .arrow file, a glob, or a save_to_disk folder)"
OFFLINE = f"point data.path at {LOCAL}"


def need_datasets():
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "data", "hf", "needs the datasets extra: pip install -e '.[datasets]' (make install installs it)"
        ) from None
    return datasets


def _local_files(path: str) -> list[Path] | None:
    """The local files `path` names (a file, a folder's files, a glob's matches), or None for a dataset name."""
    where = Path(path).expanduser()
    if any(c in path for c in "*?["):
        found = [Path(p) for p in sorted(glob.glob(str(where), recursive=True)) if Path(p).is_file()]
        if not found:
            raise ConfigError("data.path", path, "the glob matches no file; check the pattern")
        return found
    if where.is_dir():
        return sorted(p for p in where.rglob("*") if p.is_file() and not p.name.startswith("."))
    if where.is_file():
        return [where]
    if where.is_absolute() or path.startswith((".", "~")) or Path(path).suffix in BUILDERS:
        raise ConfigError("data.path", path, f"no such file or folder; {OFFLINE}")
    return None


class HFSource(Shards):
    """data=hf's keys (conf/data/hf.yaml): the dataset, its splits, the task its fields make, and the folders
    its tokenizer and shards go in."""

    def __init__(
        self,
        length: int,
        path: str,
        tokenizer=None,
        name: str | None = None,
        split: str = "train",
        val_split: str | None = None,
        val_fraction: float = 0.1,
        text_field: str = "text",
        prompt_field: str | None = None,
        response_field: str | None = None,
        messages_field: str | None = None,
        separator: str = "\n",
        val_windows: int | None = 512,
        num_proc: int | None = None,
        seed: int = 0,
        root: str = "data",
    ):
        if not path:
            raise ConfigError("data.path", path, f"required: a dataset's name, or {LOCAL}")
        self.fields = _fields(text_field, prompt_field, response_field, messages_field)
        self.separator = _separator(separator)
        for key, value in (("val_windows", val_windows), ("num_proc", num_proc)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"data.{key}", value, "must be a whole number >= 1, or null")
        self.length, self.root, self.path, self.name = length, Path(root), str(path), name
        self.split, self.val_split, self.val_fraction = split, val_split, held_out_fraction(val_fraction)
        self.task = "lm" if "text" in self.fields else "finetune"
        self.tokenizer_cfg = tokenizer_config(tokenizer if tokenizer is not None else {"kind": "char"})
        self.val_windows, self.seed = val_windows, seed
        self.num_proc = num_proc or os.cpu_count() or 1
        self.files = _local_files(self.path)
        # where the shards go: by what makes their tokens (a pair's separator too)
        stamp = [
            self.path if self.files is None else [(str(p.resolve()), *_state(p)) for p in self.files],
            name,
            split,
            val_split,
            val_fraction,
            [self.fields, self.separator] if prompt_field else self.fields,
        ]
        key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:10]
        readable = re.sub(r"[^\w.-]+", "_", Path(re.split(r"[*?\[]", self.path)[0].rstrip("/")).name)[:40]
        self.corpus_dir = self.root / "hf" / f"{readable.strip('._') or 'dataset'}-{key}"
        self.tokenizer_dir = self.corpus_dir / self.tokenizer_tag()
        self.dataset_dir = self.tokenizer_dir / "tokens"

    def prepare(self) -> Path:
        """Tokenize the dataset into shards once (harness.data.prepare_corpus's lock and checks); later calls find them."""
        from harness.data.prepare_corpus import prepare

        return prepare(self, write=_write)

    # the dataset, through datasets

    def load(self) -> dict:
        """{"train": Dataset, "val": Dataset}: data.split, and data.val_split, the dataset's own held-out split, or
        the last data.val_fraction of the training rows."""
        datasets = need_datasets()
        found = self.load_all(datasets)
        if isinstance(found, datasets.Dataset):
            found = {"train": found}
        splits = dict(found)
        if self.split not in splits:
            raise ConfigError(
                "data.split", self.split, f"not a split of the dataset; its splits: {', '.join(splits)}"
            )
        train = splits[self.split]
        if self.val_split is not None and self.val_split not in splits:
            raise ConfigError(
                "data.val_split",
                self.val_split,
                f"not a split of the dataset; its splits: {', '.join(splits)}, or null",
            )
        own = self.val_split or next((s for s in VAL_SPLITS if s in splits and s != self.split), None)
        if len(train) == 0:
            raise ConfigError(
                "data.path", self.path, f"the {self.split} split is empty; give a dataset with rows"
            )
        if own is not None:
            val = splits[own]
        else:  # the last rows held out: the same on every run
            held = max(1, round(len(train) * self.val_fraction))
            if held >= len(train):
                raise ConfigError(
                    "data.val_fraction",
                    self.val_fraction,
                    f"holds out all {len(train)} rows; give more rows or a val_split",
                )
            train, val = (
                train.select(range(len(train) - held)),
                train.select(range(len(train) - held, len(train))),
            )
        for split in (train, val):
            self._check_fields(split)
        return {"train": train, "val": val}

    def load_all(self, datasets, streaming: bool = False):
        cache = str(self.root / "hf" / "cache")
        try:
            if self.files is None:
                return datasets.load_dataset(self.path, self.name, cache_dir=cache, streaming=streaming)
            where = Path(self.path).expanduser()
            if where.is_dir() and any((where / f).is_file() for f in SAVED):
                return datasets.load_from_disk(str(where))
            builders = {BUILDERS.get(_suffix(p)) for p in self.files} - {None}
            if len(builders) != 1:
                kinds = (
                    "no file datasets reads"
                    if not builders
                    else f"files of several kinds ({', '.join(sorted(builders))})"
                )
                raise ConfigError(
                    "data.path", self.path, f"holds {kinds}; give {', '.join(BUILDERS)} files of one kind"
                )
            files = [str(p) for p in self.files if BUILDERS.get(_suffix(p))]
            if all(f.endswith(".parquet") for f in files) and not _parquet_rows(files):
                raise ConfigError(
                    "data.path", self.path, "holds no rows (empty Parquet); give a dataset with rows"
                )
            return datasets.load_dataset(
                builders.pop(), data_files=files, cache_dir=cache, streaming=streaming
            )
        except ConfigError:
            raise
        except Exception as err:  # the hub out of reach, a file datasets cannot read
            cause = err.__cause__ or err  # datasets wraps a reader's error in its own
            reason = str(cause).strip().splitlines()[0][:200] if str(cause).strip() else type(cause).__name__
            if self.files is None:
                raise ConfigError(
                    "data.path", self.path, f"cannot be loaded offline ({reason}); {OFFLINE}"
                ) from None
            raise ConfigError("data.path", self.path, f"datasets cannot read it ({reason})") from None

    def _check_fields(self, split) -> None:
        columns = split.column_names
        for role, field in self.fields.items():
            key = f"data.{role}_field"
            if field not in columns:
                raise ConfigError(key, field, f"not a field of the dataset; its fields: {', '.join(columns)}")
            kind = str(getattr(split.features[field], "dtype", type(split.features[field]).__name__))
            if role == "messages":
                ok = kind in ("list", "List", "Sequence", "LargeList") or "list" in kind.lower()
                if not ok:
                    raise ConfigError(key, field, f"is {kind}, not a list of {{role, content}} messages")
            elif kind not in ("string", "large_string"):
                raise ConfigError(key, field, f"is {kind}, not text; name a field that holds text")

    def texts(self, split):
        """The texts of `split` as the tokenizer will see them (a BPE is trained on them)."""
        render = chat_renderer(self.template_tokenizer())
        for batch in split.iter(batch_size=512):
            for row in _rows(batch):
                yield "".join(t for t, _ in self.pieces(row, render))

    def pieces(self, row: dict, render) -> list[tuple[str, bool]]:
        """An example as (text, in the loss) pieces: the whole text for language modelling."""
        if self.task == "lm":
            return [(row[self.fields["text"]], True)]
        if "messages" in self.fields:
            return message_pieces(list(row[self.fields["messages"]] or []), render)
        prompt, response = row[self.fields["prompt"]] or "", row[self.fields["response"]] or ""
        return pair_pieces(prompt, response, render, self.separator)

    def template_tokenizer(self):
        """tokenizer=hf's folder through transformers (its chat template), or None."""
        cfg = self.tokenizer_cfg
        if cfg["kind"] != "hf" or not Path(cfg["path"]).expanduser().is_dir():
            return None
        try:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(Path(cfg["path"]).expanduser()), local_files_only=True)
        except Exception:  # no transformers, or a folder it cannot read: no template
            return None


def _fields(text: str, prompt: str | None, response: str | None, messages: str | None) -> dict:
    """The fields an example is read from, by role: messages, a prompt and its response, or a text."""
    tuning_fields(prompt, response, messages)
    if messages:
        return {"messages": messages}
    return {"prompt": prompt, "response": response} if prompt else {"text": text}


def _separator(value) -> str:
    """data.separator as text, its written escapes `\\n` and `\\t` a line break and a tab (a command line passes
    them as two characters)."""
    if not isinstance(value, str):
        raise ConfigError(
            "data.separator",
            value,
            "must be text: what joins a prompt and its response (e.g. data.separator='\\n')",
        )
    return value.replace("\\n", "\n").replace("\\t", "\t")


def _parquet_rows(files: list[str]) -> int:
    """Rows the Parquet files hold, from their footers."""
    import pyarrow.parquet as pq

    try:
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # not Parquet: datasets says what is wrong with it
        return -1


def _suffix(path: Path) -> str:
    return "".join(path.suffixes[-2:-1]) if path.suffix == ".gz" else path.suffix


def _state(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_size, info.st_mtime_ns


def _rows(batch: dict):
    keys = list(batch)
    for values in zip(*(batch[k] for k in keys), strict=True):
        yield dict(zip(keys, values, strict=True))


def _encode(batch: dict, source: HFSource, tokenizer, render, bos: bool) -> dict:
    """datasets' map: a batch of rows -> their `ids` and, for fine-tuning, `loss` (1: a target to learn)."""
    ids, loss = [], []
    for row in _rows(batch):
        example_ids, example_loss = encode_example(source.pieces(row, render), tokenizer, bos)
        ids.append(example_ids)
        loss.append(example_loss)
    return {"ids": ids, "loss": loss} if source.task == "finetune" else {"ids": ids}


def _write(source: HFSource) -> None:
    """Tokenize `source` with datasets' map (several processes, cached by its fingerprint), then write the
    splits' token streams into shards (train, then val) beside a meta.json, as data=corpus's are."""
    from harness.data import prepare_corpus as preparing

    started, splits = time.perf_counter(), source.load()
    tokenizer = preparing.build_tokenizer(
        source,
        texts=lambda: source.texts(splits["train"]),
        alphabet=lambda: "".join(sorted({c for s in splits.values() for t in source.texts(s) for c in t})),
    )
    streams = _tokenized(source, splits, tokenizer)
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    with preparing.staged(source.dataset_dir) as staging:
        counts = [len(part) for part in streams["ids"]]
        meta = {
            "format": shards.FORMAT,
            "dtype": dtype,
            "tokens": sum(counts),
            "tokenizer": preparing._tokenizer_meta(tokenizer, source.tokenizer_cfg),
            "splits": {
                "train": {"start": 0, "tokens": counts[0]},
                "val": {"start": counts[0], "tokens": counts[1]},
            },
            "shards": [_shard(staging, "shard", i, part, dtype) for i, part in enumerate(streams["ids"])],
            "source": {"path": source.path, "name": source.name, "rows": [len(s) for s in splits.values()]},
        }
        if source.task == "finetune":
            starts = np.concatenate([[0], np.cumsum(np.concatenate(streams["lengths"]))]).astype(np.int64)
            meta["examples"] = {"train": len(streams["lengths"][0]), "val": len(streams["lengths"][1])}
            meta["streams"] = {
                "loss": [_shard(staging, "loss", i, part, "uint8") for i, part in enumerate(streams["loss"])],
                "starts": [_shard(staging, "starts", 0, starts, "int64")],
            }
        else:
            source.check_windows(meta)
        preparing.finish(staging, meta)
    log.info(
        "prepared %s: %s rows -> %d tokens in %.1f s",
        source.dataset_dir,
        "+".join(str(n) for n in meta["source"]["rows"]),
        meta["tokens"],
        time.perf_counter() - started,
    )


def _tokenized(source: HFSource, splits: dict, tokenizer) -> dict[str, list[np.ndarray]]:
    """Each split through datasets' map: its tokens (`ids`), each example's `lengths` and, for fine-tuning,
    which tokens are learned (`loss`), as arrays read from the mapped dataset's Arrow columns."""
    render = chat_renderer(source.template_tokenizer())
    bos = tokenizer.bos_id is not None and tokenizer.bos_id != tokenizer.eos_id
    cache = source.root / "hf" / "cache" / "tokenized"
    cache.mkdir(parents=True, exist_ok=True)
    streams: dict[str, list] = {"ids": [], "loss": [], "lengths": []}
    for name, split in splits.items():
        fingerprint = hashlib.sha256(
            json.dumps(
                [split._fingerprint, tokenizer.fingerprint(), source.fields, source.task, bos]
            ).encode()
        ).hexdigest()[:16]
        processes = min(source.num_proc, len(split) // 1000)  # a small dataset: one process
        mapped = split.map(
            _encode,
            batched=True,
            batch_size=256,
            num_proc=processes if processes > 1 else None,
            remove_columns=split.column_names,
            fn_kwargs={"source": source, "tokenizer": tokenizer, "render": render, "bos": bos},
            new_fingerprint=fingerprint,
            cache_file_name=str(cache / f"{name}-{fingerprint}.arrow"),
            desc=f"tokenizing {name}",
        )
        for column in ("ids", "loss") if source.task == "finetune" else ("ids",):
            streams[column].append(
                mapped.data.column(column).combine_chunks().flatten().to_numpy(zero_copy_only=False)
            )
        streams["lengths"].append(np.diff(mapped.data.column("ids").combine_chunks().offsets.to_numpy()))
    return streams


def _shard(folder: Path, stream: str, index: int, values: np.ndarray, dtype: str) -> dict:
    """`values` written as `folder/<stream>-NNNNN.bin`: its entry of meta.json."""
    data = np.ascontiguousarray(values, dtype=dtype).tobytes()
    name = f"{stream}-{index:05d}.bin"
    (folder / name).write_bytes(data)
    return {"file": name, "tokens": len(values), "sha256": hashlib.sha256(data).hexdigest()}
