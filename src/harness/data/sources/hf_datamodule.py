"""data=hf's datamodule (`HFDataModule`): the dataset prepared into shards (harness.data.sources.corpus_datamodule), or,
with `streaming=true`, read as a stream (datasets' IterableDataset), for what does not fit on
disk. Each rank reads its own share (datasets.distributed.split_dataset_by_node), each DataLoader worker its own
shards; rows are tokenized as they come and cut into windows of `length + 1` tokens (language modelling) or one
example a row (fine-tuning, padded). Resumable by position: the batches trained on are kept in the checkpoint,
and a resumed run skips them (each worker those it made; with workers, the loader takes from worker 0 first
again, so the first round's batches may come in another order). The validation rows are read once, into
memory: the same every validation."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from harness.config.groups.data import stream_padded
from harness.data.sampler import _rank_and_world
from harness.data.shards import TokenStore
from harness.data.sources import hf_shards as hf
from harness.data.sources.corpus_datamodule import CorpusDataModule, Packed, Padded, Windows
from harness.data.sources.finetune import chat_renderer, encode_example
from harness.data.sources.hf_shards import HFSource
from harness.errors import ConfigError

#: rows a BPE is trained on when the dataset is a stream (tokenizer=bpe): the stream's first
BPE_ROWS = 20_000
#: a stream without a validation split: val_fraction of its first PEEK rows are held out
PEEK = 1000


def _stream_splits(source) -> tuple:
    """(the training split as datasets' IterableDataset, the validation rows, read once): data.val_split's
    first `val_windows` rows, the dataset's own held-out split's, or the first val_fraction of the stream's
    first PEEK rows (the rest trained on)."""
    datasets = hf.need_datasets()
    found = source.load_all(datasets, streaming=True)
    if isinstance(found, (datasets.Dataset, datasets.IterableDataset)):
        found = {"train": found}
    splits = {
        name: s.to_iterable_dataset(num_shards=min(len(s), 64) or 1) if isinstance(s, datasets.Dataset) else s
        for name, s in found.items()
    }
    if source.split not in splits:
        raise ConfigError(
            "data.split", source.split, f"not a split of the dataset; its splits: {', '.join(splits)}"
        )
    if source.val_split is not None and source.val_split not in splits:
        raise ConfigError(
            "data.val_split",
            source.val_split,
            f"not a split of the dataset; its splits: {', '.join(splits)}, or null",
        )
    train = splits[source.split]
    own = source.val_split or next((s for s in hf.VAL_SPLITS if s in splits and s != source.split), None)
    if own is not None:
        val = list(splits[own].take(source.val_windows or PEEK))
    else:  # val_fraction of the stream's first PEEK rows held out
        held = max(1, round(len(list(train.take(PEEK))) * source.val_fraction))
        val, train = list(train.take(held)), train.skip(held)
    first = next(iter(train.take(1)), None)
    if first is None or not val:
        raise ConfigError(
            "data.path",
            source.path,
            f"the {source.split} split streams too few rows to train and validate on",
        )
    _check_row(source, first)
    return train, val


def _check_row(source, row: dict) -> None:
    """A streamed row's fields, as _check_fields checks a dataset's features."""
    for role, field in source.fields.items():
        key = f"data.{role}_field"
        if field not in row:
            raise ConfigError(key, field, f"not a field of the dataset; its fields: {', '.join(row)}")
        ok = isinstance(row[field], list) if role == "messages" else isinstance(row[field], str)
        if not ok:
            raise ConfigError(
                key,
                field,
                f"is {type(row[field]).__name__}, not {'a list of messages' if role == 'messages' else 'text'}",
            )


class Tokens:
    """A token array in memory behind TokenStore's `read`: a streamed dataset's validation split."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def read(self, start: int, count: int) -> np.ndarray:
        return self.ids[start : start + count]


def _examples(source, rows, tokenizer, render, bos: bool):
    """(ids, loss) of each row, tokenized as it comes."""
    for row in rows:
        yield encode_example(source.pieces(row, render), tokenizer, bos)


class StreamWindows(IterableDataset):
    """The training split as a stream of Batch items, this rank's and this worker's share; `skip`: batches of
    `batch_size` this process's loader already trained on (a resumed run), which it reads past."""

    def __init__(self, source, stream, tokenizer, length: int, batch_size: int):
        self.source, self.stream, self.tokenizer = source, stream, tokenizer
        self.width, self.batch_size, self.skip = length + 1, batch_size, 0
        self.bos = tokenizer.bos_id is not None and tokenizer.bos_id != tokenizer.eos_id
        self.render = chat_renderer(source.template_tokenizer())

    def _rows(self):
        from datasets.distributed import split_dataset_by_node

        rank, ranks = _rank_and_world()
        mine = split_dataset_by_node(self.stream, rank=rank, world_size=ranks) if ranks > 1 else self.stream
        epoch = 0
        while True:  # epochs end where the stream does; Lightning stops at max_steps
            mine.set_epoch(epoch)
            count = 0
            for row in mine:
                count += 1
                yield row
            if not count:
                return
            epoch += 1

    def _items(self):
        examples = _examples(self.source, self._rows(), self.tokenizer, self.render, self.bos)
        if self.source.task == "finetune":  # one example a row, padded with the end of text
            pad = self.tokenizer.eos_id if self.tokenizer.eos_id is not None else 0
            for ids, loss in examples:
                ids, loss = ids[: self.width], loss[: self.width]
                if not any(loss[1:]):
                    continue
                tokens = torch.full((self.width,), pad, dtype=torch.long)
                learned = torch.zeros(self.width, dtype=torch.bool)
                tokens[: len(ids)], learned[: len(ids)] = (
                    torch.tensor(ids),
                    torch.tensor(loss, dtype=torch.bool),
                )
                yield {"input_ids": tokens[:-1], "targets": tokens[1:], "loss_mask": learned[1:]}
            return
        carry: list[int] = []
        for ids, _ in examples:  # documents end to end, cut into windows
            carry += ids
            while len(carry) >= self.width:
                window, carry = torch.tensor(carry[: self.width]), carry[self.width :]
                yield {
                    "input_ids": window[:-1],
                    "targets": window[1:],
                    "loss_mask": torch.ones(self.width - 1, dtype=torch.bool),
                }

    def __iter__(self):
        worker = get_worker_info()
        w, workers = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        # the loader takes batches from its workers in turn: worker w made every workers-th of those trained on
        skip, self.skip = (max(self.skip - w, 0) + workers - 1) // workers * self.batch_size, 0
        for k, item in enumerate(self._items()):
            if k >= skip:
                yield item

    def record(self, i: int) -> dict:
        """The i-th item this dataset yields in one process, decoded (as its loader hands it out)."""
        for k, item in enumerate(self._items()):
            if k == i:
                ids = [*item["input_ids"].tolist(), item["targets"][-1].item()]
                if self.source.task == "lm":
                    return {"text": self.tokenizer.decode(ids)}
                mask = item["loss_mask"].tolist()
                first, last = mask.index(True) + 1, len(mask) - mask[::-1].index(True) + 1
                return {
                    "text": self.tokenizer.decode(ids[:first]),
                    "label": self.tokenizer.decode(ids[first:last]),
                }
        raise IndexError(i)


class StreamLoader(DataLoader):
    """The stream's loader, its position kept in a checkpoint (batches trained on, set by
    harness.train.checkpoints.ResumeState) and skipped to on resume."""

    def __init__(self, dataset: StreamWindows, **kwargs):
        super().__init__(dataset, batch_size=dataset.batch_size, **kwargs)
        self.trained = (0, 0)

    def state_dict(self) -> dict:
        return {"batches": self.trained[1]}

    def load_state_dict(self, state: dict) -> None:
        self.dataset.skip = state["batches"]


def streamed(source, tokenizer_of, length: int, batch_size: int):
    """(tokenizer, training StreamWindows, validation Dataset) of a streamed `source` (HFSource)."""
    train, val_rows = _stream_splits(source)
    tokenizer = tokenizer_of(lambda: source.texts(train.take(BPE_ROWS)))
    render = chat_renderer(source.template_tokenizer())
    bos = tokenizer.bos_id is not None and tokenizer.bos_id != tokenizer.eos_id
    examples = list(_examples(source, val_rows, tokenizer, render, bos))
    stream = StreamWindows(source, train, tokenizer, length, batch_size)
    if source.task == "finetune":
        ids = np.array([i for e, _ in examples for i in e], dtype=np.int64)
        loss = np.array([v for _, e in examples for v in e], dtype=np.uint8)
        starts = np.concatenate([[0], np.cumsum([len(e) for e, _ in examples])]).astype(np.int64)
        return (
            tokenizer,
            stream,
            Padded(Tokens(ids), Tokens(loss), starts, tokenizer, length, 0, len(examples)),
        )
    ids = np.array([i for e, _ in examples for i in e], dtype=np.int64)
    return tokenizer, stream, Windows(Tokens(ids), tokenizer, length, 0, len(ids), count=source.val_windows)


class HFDataModule(CorpusDataModule):
    """data=hf: any Hugging Face dataset (harness.data.sources.hf_shards.HFSource's keys) for language modelling on
    windows, or fine-tuning on its responses, padded one example a row or packed (`packing`); prepared into
    shards, or read as a stream (`streaming`: StreamWindows)."""

    source = HFSource

    def __init__(self, length: int, packing: bool = False, streaming: bool = False, **keys):
        for key, value in (("packing", packing), ("streaming", streaming)):
            if not isinstance(value, bool):
                raise ConfigError(f"data.{key}", value, "must be true or false")
        stream_padded(packing, streaming)
        super().__init__(length=length, **keys)
        self.packing, self.streaming = packing, streaming

    def prepare_data(self) -> None:
        """Shards prepared once; a stream's BPE trained once on its first rows (stream.BPE_ROWS)."""
        if not self.streaming:
            return super().prepare_data()
        from harness.data.prepare_corpus import _lock_held

        with _lock_held(self.corpus.corpus_dir.parent / f".{self.corpus.corpus_dir.name}.lock"):
            self._stream_tokenizer(lambda: self.corpus.texts(_stream_splits(self.corpus)[0].take(BPE_ROWS)))

    def _stream_tokenizer(self, texts):
        from harness.data.prepare_corpus import build_tokenizer

        return build_tokenizer(
            self.corpus, texts=texts, alphabet=lambda: "".join(sorted(set("".join(texts()))))
        )

    def setup(self, stage: str | None = None) -> None:
        if not self.streaming:
            return super().setup(stage)
        if self.train_dataset is None:
            self.tokenizer, self.train_dataset, self.val_dataset = streamed(
                self.corpus, self._stream_tokenizer, self.length, self.batch_size
            )

    def train_dataloader(self) -> DataLoader:
        if not self.streaming:
            return super().train_dataloader()
        workers = dict(num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        return StreamLoader(self.train_dataset, **workers)

    def examples(self, store, meta: dict) -> tuple[Dataset, Dataset]:
        """Fine-tuning's two splits, padded one example a row, or packed (`packing`) into windows that
        declare their documents."""
        loss = TokenStore(self.dataset_dir, {"shards": meta["streams"]["loss"], "dtype": "uint8"})
        starts_store = TokenStore(self.dataset_dir, {"shards": meta["streams"]["starts"], "dtype": "int64"})
        starts = starts_store.read(0, len(starts_store))
        counts, splits = meta["examples"], meta["splits"]
        common = dict(store=store, loss=loss, starts=starts, tokenizer=self.tokenizer, length=self.length)
        if not self.packing:
            train = Padded(**common, first=0, end=counts["train"])
            val = Padded(**common, first=counts["train"], end=counts["train"] + counts["val"])
            for name, split in (("train", train), ("val", val)):
                if not len(split):
                    raise ConfigError(
                        "data.length",
                        self.length,
                        f"no {name} example has a response inside its first {self.length + 1} tokens; use a longer "
                        "data.length (or data.packing=true)",
                    )
            return train, val
        self.corpus.check_windows(meta)
        train, val = splits["train"], splits["val"]
        return (
            Packed(**common, begin=0, end=train["tokens"], seed=self.corpus.seed),
            Packed(
                **common, begin=val["start"], end=val["start"] + val["tokens"], count=self.corpus.val_windows
            ),
        )

    def unigram_entropy(self) -> float | None:
        """The training tokens' unigram entropy (CorpusDataModule's); None for a stream, never all at hand."""
        return None if self.streaming else super().unigram_entropy()
