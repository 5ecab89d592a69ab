"""data=corpus's datamodule: language modelling on windows of `length + 1` tokens of a corpus's shards
(harness.data.shards), read through memory maps. Training window i starts at a place drawn from (seed, i)
alone; validation windows are fixed and do not overlap."""

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


class CorpusDataModule(DiskDataModule):
    """Next-token prediction on a corpus: the keys of harness.data.sources.corpus.Corpus, plus the loaders'
    `batch_size` and `num_workers`."""

    def __init__(self, length: int, batch_size: int = 16, num_workers: int = 0, root: str = "data", **corpus):
        super().__init__(length=length, batch_size=batch_size, root=root, num_workers=num_workers)
        self.corpus = Corpus(length=length, root=root, **corpus)
        self.dataset_dir: Path = self.corpus.dataset_dir

    def prepare_data(self) -> None:
        """Tokenize the corpus into shards once (harness.data.prepare); a later call finds them and returns."""
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
        self.corpus.check_windows(meta)
        self.tokenizer = self.corpus.load_tokenizer(meta)
        store = shards.TokenStore(self.dataset_dir, meta)
        train, val = meta["splits"]["train"], meta["splits"]["val"]
        window = dict(store=store, tokenizer=self.tokenizer, length=self.length)
        # drawn from (seed, i) alone: overfit mode's Head and the resumable sampler index it like any dataset
        self.train_dataset = Windows(**window, begin=0, end=train["tokens"], seed=self.corpus.seed)
        self.val_dataset = Windows(
            **window, begin=val["start"], end=val["start"] + val["tokens"], count=self.corpus.val_windows
        )

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
