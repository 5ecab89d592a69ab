"""The datamodule of token shards (harness.data.shards), read through memory maps: data=corpus's language
modelling on windows of `length + 1` tokens (training window i starts at a place drawn from (seed, i) alone;
validation windows are fixed and do not overlap); data=hf's (harness.data.sources.hf_datamodule) also fine-tunes on
examples padded one a row (`Padded`) or packed into windows that declare their documents (`Packed`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from harness.data import integrity, shards
from harness.data.dataset import DiskDataModule
from harness.data.sources.corpus import Corpus, window_start
from harness.errors import ConfigError


class Windows(Dataset):
    """Windows of `length + 1` tokens of the range [begin, end) of a token stream, as Batch items; `record(i)`
    decodes window i. With `seed`, window i lies at a place drawn from (seed, i); without, `count` windows
    spread evenly."""

    def __init__(self, store, tokenizer, length: int, begin: int, end: int, seed=None, count=None):
        self.store, self.tokenizer, self.width = store, tokenizer, length + 1
        self.begin, self.end, self.seed = begin, end, seed
        self.tiles = (end - begin) // self.width
        self.count = self.tiles if seed is not None or count is None else min(count, self.tiles)

    def __len__(self) -> int:
        return self.count

    def start(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise IndexError(i)
        if self.seed is not None:
            return self.begin + window_start(self.seed, i, self.end - self.begin - self.width + 1)
        return self.begin + self.width * (i * self.tiles // self.count)

    def __getitem__(self, i: int) -> dict:
        window = torch.from_numpy(self.store.read(self.start(i), self.width).astype(np.int64))
        loss_mask = torch.ones(self.width - 1, dtype=torch.bool)
        return {"input_ids": window[:-1], "targets": window[1:], "loss_mask": loss_mask}

    def record(self, i: int) -> dict:
        return {"text": self.tokenizer.decode(self.store.read(self.start(i), self.width).tolist())}


class Padded(Dataset):
    """One example a row: its first length + 1 tokens, padded with the EOS; the loss on its response tokens
    only. Examples whose responses begin past the window are left out (nothing in them to learn)."""

    def __init__(self, store, loss, starts: np.ndarray, tokenizer, length: int, first: int, end: int):
        self.store, self.loss, self.tokenizer, self.width = store, loss, tokenizer, length + 1
        self.pad = tokenizer.eos_id if tokenizer.eos_id is not None else 0
        begins, ends = starts[first:end], starts[first + 1 : end + 1]
        origin = int(begins[0]) if len(begins) else 0
        in_loss = np.flatnonzero(loss.read(origin, int(ends[-1]) - origin) if len(begins) else []) + origin
        k = np.searchsorted(in_loss, begins)  # each example's first token in the loss, if it has one
        firsts = np.full(len(begins), np.iinfo(np.int64).max)
        firsts[k < len(in_loss)] = in_loss[k[k < len(in_loss)]]
        keep = (firsts < ends) & (firsts > begins) & (firsts - begins < self.width)
        self.begins, self.ends = begins[keep], ends[keep]
        self.begin, self.end = origin, int(ends[-1]) if len(ends) else origin  # the split's tokens

    def __len__(self) -> int:
        return len(self.begins)

    def _row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        begin = int(self.begins[i])
        count = min(int(self.ends[i]) - begin, self.width)
        return self.store.read(begin, count).astype(np.int64), self.loss.read(begin, count).astype(bool)

    def __getitem__(self, i: int) -> dict:
        ids, loss = self._row(i)
        tokens = torch.full((self.width,), self.pad, dtype=torch.long)
        in_loss = torch.zeros(self.width, dtype=torch.bool)
        tokens[: len(ids)], in_loss[: len(ids)] = torch.from_numpy(ids), torch.from_numpy(loss)
        return {"input_ids": tokens[:-1], "targets": tokens[1:], "loss_mask": in_loss[1:]}

    def record(self, i: int) -> dict:
        """The example's tokens decoded: `text` up to its first answer, `label` the rest (its end's EOS too)."""
        ids, loss = self._row(i)
        first = int(np.argmax(loss))
        return {
            "text": self.tokenizer.decode(ids[:first].tolist()),
            "label": self.tokenizer.decode(ids[first:].tolist()),
        }


class Packed(Windows):
    """Windows of the examples packed end to end (harness.data.sources.corpus_datamodule), the loss on their responses
    only, each window declaring its documents (`document_ids`, one example each) for `document_isolation`."""

    def __init__(self, loss, starts: np.ndarray, **windows):
        super().__init__(**windows)
        self.loss, self.starts = loss, starts

    def __getitem__(self, i: int) -> dict:
        item, start = super().__getitem__(i), self.start(i)
        item["loss_mask"] = torch.from_numpy(self.loss.read(start + 1, self.width - 1).astype(bool))
        documents = np.searchsorted(self.starts, np.arange(start, start + self.width - 1), side="right")
        item["document_ids"] = torch.from_numpy((documents - documents[0]).astype(np.int64))
        return item

    def record(self, i: int) -> dict:
        """The window's text as the loss reads it: to its last target in the loss (all of it without one)."""
        start = self.start(i)
        learned = np.flatnonzero(self.loss.read(start + 1, self.width - 1))
        end = int(learned[-1]) + 2 if len(learned) else self.width - 1
        return {"text": self.tokenizer.decode(self.store.read(start, end).tolist())}


class CorpusDataModule(DiskDataModule):
    """Next-token prediction on a corpus: the keys of harness.data.sources.corpus.Corpus, plus the loaders'
    `batch_size` and `num_workers`."""

    source = Corpus  # what its keys describe: a Shards source (harness.data.sources.corpus)

    def __init__(self, length: int, batch_size: int = 16, num_workers: int = 0, root: str = "data", **corpus):
        super().__init__(length=length, batch_size=batch_size, root=root, num_workers=num_workers)
        self.corpus = self.source(length=length, root=root, **corpus)
        self.dataset_dir: Path = self.corpus.dataset_dir

    def prepare_data(self) -> None:
        """Tokenize the corpus into shards once (harness.data.prepare_corpus); a later call finds them and returns."""
        self.corpus.prepare()

    def setup(self, stage: str | None = None) -> None:
        if self.train_dataset is not None:
            return
        meta, wrong = integrity.read_meta(self.dataset_dir)
        if meta is None:
            raise ConfigError(
                "data.root",
                str(self.root),
                f"no whole prepared corpus at {self.dataset_dir} ({wrong}): call prepare_data() first",
            )
        self.tokenizer = self.corpus.load_tokenizer(meta)
        store = shards.TokenStore(self.dataset_dir, meta)
        if "streams" in meta:  # fine-tuning: examples, their responses in the loss
            self.train_dataset, self.val_dataset = self.examples(store, meta)
            return
        self.corpus.check_windows(meta)
        train, val = meta["splits"]["train"], meta["splits"]["val"]
        window = dict(store=store, tokenizer=self.tokenizer, length=self.length)
        # drawn from (seed, i) alone: overfit mode's Head and the resumable sampler index it like any dataset
        self.train_dataset = Windows(**window, begin=0, end=train["tokens"], seed=self.corpus.seed)
        self.val_dataset = Windows(
            **window, begin=val["start"], end=val["start"] + val["tokens"], count=self.corpus.val_windows
        )

    def examples(self, store, meta: dict) -> tuple[Dataset, Dataset]:
        """The two splits of fine-tuning shards (their `streams`): data=hf's (harness.data.sources.hf_datamodule)."""
        raise ConfigError("data", str(self.dataset_dir), "holds fine-tuning examples: read them with data=hf")

    def unigram_entropy(self) -> float:
        """Nats per token of the training tokens' unigram distribution: the best a model that ignores its
        context can score."""
        train, chunk = self.train_dataset, 1 << 24  # read in chunks: constant memory whatever the corpus size
        counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
        for start in range(train.begin, train.end, chunk):
            tokens = train.store.read(start, min(chunk, train.end - start))
            counts += np.bincount(tokens, minlength=counts.size)[: counts.size]
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())
