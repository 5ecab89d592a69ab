"""DataModules a fork might write, each correct: padded language modelling, classification, a sharded stream and
windows of real text.

Each meets the DataModule contract (docs/contracts.md): built from `length` and keyword arguments with defaults,
and after `setup()` it has `tokenizer`, `train_dataset` and `val_dataset` (each with `record(i)`) and loaders of
Batch dicts. The buggy ones (buggy.py, buggy_habits.py) subclass these and change one thing."""

from __future__ import annotations

import random

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from harness.data.tokenizer import CharTokenizer
from tests.forks.data.parts import (
    DOCUMENTS,
    Examples,
    ForkData,
    SpecialsTokenizer,
    alphabet,
    help_paragraphs,
    help_text,
    pad_rows,
    random_records,
)


class PaddedLM(ForkData):
    """Sentences as <bos> text <eos>, cut to length + 1 tokens, right-padded with <pad> in collate; pads not in the loss.

    record(i) is the example's real tokens decoded, specials by name ("<bos>Jump!<eos>"; a cut one has no <eos>)."""

    specials = ("<pad>", "<bos>", "<eos>")
    tokenizer_class = SpecialsTokenizer

    def build(self) -> None:
        documents = list(DOCUMENTS)
        random.Random(self.seed).shuffle(documents)
        self.tokenizer = self.tokenizer_class(alphabet(documents), self.specials)
        cut = int(0.8 * len(documents))
        self.train_dataset, self.val_dataset = (
            self.documents(documents[:cut]),
            self.documents(documents[cut:]),
        )

    def documents(self, documents: list[str]) -> Examples:
        tok = self.tokenizer
        rows = [([tok.bos_id, *tok.encode(d), tok.eos_id])[: self.length + 1] for d in documents]
        return Examples([{"text": tok.decode(row)} for row in rows], [torch.tensor(row) for row in rows])

    def collate(self, rows: list[torch.Tensor]) -> dict:
        ids, real = pad_rows(rows, self.length + 1, self.tokenizer.pad_id)
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": real[:, 1:]}


def more_a_than_b(text: str) -> str:
    return "y" if text.count("a") > text.count("b") else "n"


class PaddedClassification(ForkData):
    """Texts of 4 to `length` letters, label y/n (more a's than b's) at the last real position; right-padded in collate."""

    letters, labels = "abcdefgh", "ny"

    def __init__(
        self,
        length: int,
        size: int = 200,
        val_size: int = 50,
        batch_size: int = 8,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__(length, batch_size, num_workers, seed)
        self.size, self.val_size = size, val_size

    def build(self) -> None:
        self.tokenizer = tok = SpecialsTokenizer(self.letters + self.labels, specials=("<pad>",))
        lengths = (min(4, self.length), self.length)
        records = random_records(self.size + self.val_size, lengths, self.letters, more_a_than_b, self.seed)
        self.train_dataset, self.val_dataset = (
            Examples(part, [(torch.tensor(tok.encode(r["text"])), tok.index[r["label"]]) for r in part])
            for part in (records[: self.size], records[self.size :])
        )

    def label_positions(self, lengths: torch.Tensor) -> torch.Tensor:
        return lengths - 1  # the last real position: the whole text has been read

    def collate(self, items: list) -> dict:
        pad = self.tokenizer.pad_id
        ids, real = pad_rows([text for text, _ in items], self.length, pad)
        rows, last = torch.arange(len(items)), self.label_positions(real.sum(1))
        targets, loss_mask = torch.full_like(ids, pad), torch.zeros_like(real)
        targets[rows, last] = torch.tensor([label for _, label in items])
        loss_mask[rows, last] = True
        return {"input_ids": ids, "targets": targets, "loss_mask": loss_mask}


class FixedClassification(ForkData):
    """Texts of exactly `length` letters, labelled x/y/z by the sum of their letters mod 3 at the last position."""

    letters, labels = "abcdefghijklmnop", "xyz"

    def __init__(
        self,
        length: int,
        size: int = 256,
        val_size: int = 64,
        batch_size: int = 8,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__(length, batch_size, num_workers, seed)
        self.size, self.val_size = size, val_size

    def label(self, text: str) -> str:
        return self.labels[sum(map(self.letters.index, text)) % len(self.labels)]

    def build(self) -> None:
        self.tokenizer = CharTokenizer(self.letters + self.labels)
        lengths = (self.length, self.length)
        records = random_records(self.size + self.val_size, lengths, self.letters, self.label, self.seed)
        train, val = self.split(records)
        self.train_dataset = Examples(train, [self.encode(r) for r in train])
        self.val_dataset = Examples(val, [self.encode(r) for r in val])

    def split(self, records: list[dict]) -> tuple[list[dict], list[dict]]:
        return records[: self.size], records[self.size :]

    def encode(self, record: dict) -> dict:
        ids = torch.tensor(self.tokenizer.encode(record["text"] + record["label"]))
        loss_mask = torch.zeros(self.length, dtype=torch.bool)
        loss_mask[-1] = True
        return {"input_ids": ids[:-1], "targets": ids[1:], "loss_mask": loss_mask}


class StreamWindows(IterableDataset):
    """Documents joined into one token stream, each followed by <eos>, cut into windows of length + 1 tokens.

    Each DataLoader worker reads every num_workers-th window; record(i) is window i of the whole stream, decoded."""

    def __init__(self, documents: list[str], tokenizer, length: int):
        ids = [i for document in documents for i in [*tokenizer.encode(document), tokenizer.eos_id]]
        self.tokens, self.tokenizer, self.length = torch.tensor(ids), tokenizer, length

    def __len__(self) -> int:
        return len(self.tokens) // (self.length + 1)

    def window(self, i: int) -> torch.Tensor:
        return self.tokens[i * (self.length + 1) : (i + 1) * (self.length + 1)]

    def item(self, i: int) -> dict:
        window = self.window(i)
        return {
            "input_ids": window[:-1],
            "targets": window[1:],
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }

    def __iter__(self):
        worker = get_worker_info()
        shard = range(len(self)) if worker is None else range(worker.id, len(self), worker.num_workers)
        for i in shard:
            yield self.item(i)

    def record(self, i: int) -> dict:
        return {"text": self.tokenizer.decode(self.window(i).tolist())}


class ShuffleBuffer(IterableDataset):
    """Shuffles a stream through a buffer of `size` items (each worker its own order, from its torch seed)."""

    def __init__(self, dataset: IterableDataset, size: int = 64):
        self.dataset, self.size = dataset, size

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self):
        rng, buffer = random.Random(torch.initial_seed()), []
        for item in self.dataset:
            buffer.append(item)
            if len(buffer) >= self.size:
                yield buffer.pop(rng.randrange(len(buffer)))
        rng.shuffle(buffer)
        yield from buffer


class StreamingLM(ForkData):
    """Help-topic paragraphs streamed as <eos>-separated windows, sharded over 2 workers, shuffled by a buffer."""

    stream = StreamWindows

    def __init__(
        self,
        length: int,
        batch_size: int = 8,
        num_workers: int = 2,
        seed: int = 0,
        chars: int = 12_000,
        buffer: int = 64,
    ):
        super().__init__(length, batch_size, num_workers, seed)
        self.chars, self.buffer = chars, buffer

    def make_tokenizer(self, letters: str):
        return SpecialsTokenizer(letters, specials=("<eos>",))

    def build(self) -> None:
        documents, total = [], 0
        for paragraph in help_paragraphs():
            if total >= self.chars:
                break
            documents.append(paragraph)
            total += len(paragraph) + 1
        self.tokenizer = self.make_tokenizer(alphabet(documents))
        cut = int(0.9 * len(documents))
        self.train_dataset = self.stream(documents[:cut], self.tokenizer, self.length)
        self.val_dataset = self.stream(documents[cut:], self.tokenizer, self.length)

    def train_dataloader(self) -> DataLoader:
        shuffled = ShuffleBuffer(self.train_dataset, self.buffer)
        return DataLoader(shuffled, self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_dataset, self.batch_size, num_workers=self.num_workers)


class Windows(Dataset):
    """Non-overlapping windows of length + 1 tokens of a character-tokenized text; record(i) is the window's text."""

    def __init__(self, text: str, tokens: torch.Tensor, length: int):
        self.text, self.tokens, self.length = text, tokens, length

    def __len__(self) -> int:
        return len(self.tokens) // (self.length + 1)

    def start(self, i: int) -> int:
        return i * (self.length + 1)

    def __getitem__(self, i: int) -> dict:
        window = self.tokens[self.start(i) : self.start(i) + self.length + 1]
        return {
            "input_ids": window[:-1],
            "targets": window[1:],
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }

    def record(self, i: int) -> dict:
        return {"text": self.text[self.start(i) : self.start(i) + self.length + 1]}


class TextWindowsLM(ForkData):
    """The first `chars` characters of Python's help topics, one character a token, in windows: 90% train, the rest val."""

    windows = Windows

    def __init__(
        self, length: int, batch_size: int = 8, num_workers: int = 0, seed: int = 0, chars: int = 12_000
    ):
        super().__init__(length, batch_size, num_workers, seed)
        self.chars = chars

    def build(self) -> None:
        text = help_text(self.chars)
        self.tokenizer = CharTokenizer(alphabet(text))
        self.train_dataset, self.val_dataset = self.split(text, torch.tensor(self.tokenizer.encode(text)))

    def split(self, text: str, tokens: torch.Tensor) -> tuple[Dataset, Dataset]:
        cut = int(0.9 * len(tokens))
        return self.windows(text[:cut], tokens[:cut], self.length), self.windows(
            text[cut:], tokens[cut:], self.length
        )
