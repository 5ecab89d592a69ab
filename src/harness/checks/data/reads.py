"""DataReads: what the data checks read of a fork's datamodule, read once for all of them: its own loaders'
first batches, the dataset index behind each row, a bounded sample of each split. A check takes a datamodule
or a DataReads (`as_data_reads`)."""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping
from itertools import islice

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from harness.data.batch import collate_of, indexable

SPLITS = ("train", "val")
#: batches of each loader the checks read
BATCHES = 3
#: items of a split the overlap check hashes at most, and the seconds it reads them for at most
ITEMS, ITEM_SECONDS = 4096, 2.0


def copied_batch(batch):
    """`batch` with every tensor copied (a loader may hand out views of memory it reuses); a mapping as a
    dict."""
    if isinstance(batch, Mapping):
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    return batch


class Recorder(Dataset):
    """A map-style dataset read through, noting every index asked of it: which example each row of a batch is."""

    def __init__(self, dataset):
        self.dataset, self.taken = dataset, []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        self.taken.append(i)
        return self.dataset[i]


class DataReads:
    """A datamodule, set up, and what the data checks read of it; each read happens once."""

    def __init__(self, module, cfg=None):
        self.module, self.cfg = module, cfg
        self.tokenizer = module.tokenizer
        self._cache: dict = {}

    @property
    def length(self) -> int | None:
        """data.length of the run's config, the longest an example may be; None without a config."""
        data = (self.cfg or {}).get("data", None) or {}
        length = data.get("length", None) if hasattr(data, "get") else None
        return length if isinstance(length, int) else None

    def once(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def close(self) -> None:
        """End the worker processes of the loaders read (a loader with persistent workers keeps them)."""
        from harness.compat import shutdown_workers

        for key, loader in self._cache.items():
            if key[0] == "loader" and isinstance(loader, DataLoader):
                shutdown_workers(loader)

    def dataset(self, split: str):
        return getattr(self.module, f"{split}_dataset", None)

    def loader(self, split: str) -> DataLoader | None:
        """The split's loader as the fork builds it (one call of its `<split>_dataloader()`)."""
        return self.once(("loader", split), lambda: getattr(self.module, f"{split}_dataloader")())

    def record_source(self, split: str):
        """The dataset whose `record(i)` is example i's source: the datamodule's own, else the one its loader
        reads."""
        for dataset in (self.dataset(split), getattr(self.loader(split), "dataset", None)):
            if dataset is not None and callable(getattr(dataset, "record", None)):
                return dataset
        return None

    def batches(self, split: str, count: int = BATCHES) -> list:
        """The first `count` batches of the split's own loader, workers and all (fewer at an epoch's end)."""

        def read():
            loader = self.loader(split)
            iterator = iter(loader)
            try:
                return [copied_batch(b) for b in islice(iterator, count)]
            finally:
                del iterator  # its worker processes end here, not when the collector gets to them

        return self.once(("batches", split, count), read)

    def indexed(self, split: str) -> tuple[dict, list[int]] | None:
        """The split's first batch, made by its loader's sampler and collate in this process, and each row's
        index in `record_source(split)`; None where rows cannot be traced."""
        return self.once(("indexed", split), lambda: self._indexed(split))

    def _indexed(self, split: str):
        loader, source = self.loader(split), self.record_source(split)
        if loader is None or source is None or getattr(loader, "batch_sampler", None) is None:
            return None
        read = loader.dataset
        if not indexable(read):  # a stream: the records' own dataset, read in order in this process
            rows = DataLoader(source, batch_size=loader.batch_size, collate_fn=collate_of(loader))
            batch = copied_batch(next(iter(rows), None))
            count = len(batch["input_ids"]) if isinstance(batch, dict) and "input_ids" in batch else 0
            return None if batch is None else (batch, list(range(count)))
        recorder = Recorder(read)
        rows = DataLoader(recorder, batch_sampler=loader.batch_sampler, collate_fn=collate_of(loader))
        batch = copied_batch(next(iter(rows), None))
        try:
            taken = [operator.index(i) for i in recorder.taken]
        except TypeError:  # a sampler of keys that are not positions: rows cannot be traced to record(i)
            return None
        if batch is None:
            return None
        if read is not source:  # a Subset of the records' dataset maps back to its indices; others cannot
            if not (isinstance(read, Subset) and read.dataset is source):
                return None
            taken = [int(read.indices[i]) for i in taken]
        return batch, taken

    def items(self, split: str, limit: int = ITEMS, seconds: float = ITEM_SECONDS) -> tuple[list, float]:
        """Up to `limit` items of the split (spread over a map-style dataset; a stream's first) read within
        `seconds`, and their share of the split (a stream: 1.0 read whole, else 0)."""
        return self.once(("items", split), lambda: self._items(split, limit, seconds))

    def _items(self, split: str, limit: int, seconds: float):
        dataset = self.dataset(split)
        if dataset is None:
            return [], 0.0
        deadline = time.perf_counter() + seconds
        if indexable(dataset):
            size = len(dataset)
            picks = sorted({i * size // limit for i in range(limit)}) if size > limit else range(size)
            items = []
            for i in picks:
                items.append(dataset[i])
                if time.perf_counter() > deadline:
                    break
            return items, len(items) / max(size, 1)
        items, ended = [], True
        for item in dataset:
            if len(items) == limit or time.perf_counter() > deadline:
                ended = False
                break
            items.append(item)
        return items, 1.0 if ended else 0.0


def as_data_reads(data, cfg=None) -> DataReads:
    """`data` as a DataReads: itself, or a new one over a datamodule."""
    return data if isinstance(data, DataReads) else DataReads(data, cfg)
