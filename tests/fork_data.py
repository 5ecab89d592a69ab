"""DataModules a fork might write, used by tests: correct ones, and ones with one planted data-pipeline mistake.

Each meets the DataModule contract (docs/contracts.md): built from `length` and keyword arguments with defaults,
and after `setup()` it has `tokenizer`, `train_dataset` and `val_dataset` (each with `record(i)`) and loaders of
Batch dicts. Each buggy class says its mistake in its docstring, after "BUG:"; everything else in it is right.
Self-contained: torch, pytorch_lightning and the standard library, nothing downloaded (the real text is Python's
own help topics, `pydoc_data`, shipped with CPython). `CORRECT` and `BUGGY` at the end name them all, and
`build(cls, length)` makes one ready to use."""

from __future__ import annotations

import functools
import hashlib
import random
from collections import UserDict

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, default_collate, get_worker_info

from harness.data.tokenizer import CharTokenizer

#: short English sentences of every length (3 to 56 characters), no two starting with the same 16 characters
DOCUMENTS = (
    "Hi.",
    "Yes.",
    "Stop.",
    "Jump!",
    "Help!",
    "Me too.",
    "Cheers!",
    "Oh dear.",
    "I agree.",
    "Go home.",
    "Hold on.",
    "Come in.",
    "Why not?",
    "Ask Ann.",
    "Nice try.",
    "Sit down.",
    "Be quiet.",
    "Run, Tom!",
    "Thank you.",
    "Well done.",
    "Who knows?",
    "Try again.",
    "Lights out.",
    "Good night.",
    "So it goes.",
    "Not again!",
    "Fine, thanks.",
    "Drive safely.",
    "It is raining.",
    "Silence is golden.",
    "Haste makes waste.",
    "Knowledge is power.",
    "Easy come, easy go.",
    "Waste not, want not.",
    "No news is good news.",
    "Old habits die hard.",
    "Look before you leap.",
    "Please pass the salt.",
    "Great minds think alike.",
    "Better late than never.",
    "Practice makes perfect.",
    "Tomorrow is another day.",
    "Who left the door open?",
    "Bake the bread at noon.",
    "Still waters run deep.",
    "It takes two to tango.",
    "Quit while you're ahead.",
    "Zebras sleep standing up.",
    "Oil and water do not mix.",
    "Fortune favours the bold.",
    "Curiosity killed the cat.",
    "See you tomorrow at nine.",
    "Out of sight, out of mind.",
    "Honesty is the best policy.",
    "A stitch in time saves nine.",
    "Rome was not built in a day.",
    "Many hands make light work.",
    "There is no place like home.",
    "Variety is the spice of life.",
    "Slow and steady wins the race.",
    "All that glitters is not gold.",
    "Two heads are better than one.",
    "Under the bridge lives a troll.",
    "Every good boy deserves fudge.",
    "Laughter is the best medicine.",
    "The early bird catches the worm.",
    "Actions speak louder than words.",
    "Every cloud has a silver lining.",
    "The train to Leeds is late again.",
    "Where there's smoke, there's fire.",
    "Birds of a feather flock together.",
    "When in Rome, do as the Romans do.",
    "The pen is mightier than the sword.",
    "Kites fly highest against the wind.",
    "Cleanliness is next to godliness.",
    "Idle hands are the devil's workshop.",
    "You can't judge a book by its cover.",
    "My keyboard is missing the letter q.",
    "Beauty is in the eye of the beholder.",
    "Necessity is the mother of invention.",
    "An apple a day keeps the doctor away.",
    "Don't count your chickens before they hatch.",
    "People who live in glass houses should not throw stones.",
)

#: typographic characters of the help topics, written in ASCII
TO_ASCII = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "–": "-", "—": "-", "…": "...", "°": "o"})


@functools.cache
def help_paragraphs() -> tuple[str, ...]:
    """The paragraphs of Python's help topics, in ASCII, whitespace collapsed, heading underlines and repeats dropped."""
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in topics[name].split("\n\n"):
            lines = [line for line in block.splitlines() if set(line.strip()) - set("*=-~^ ")]
            text = " ".join(" ".join(lines).translate(TO_ASCII).split())
            paragraphs.append(text.encode("ascii", "ignore").decode())
    return tuple(p for p in dict.fromkeys(paragraphs) if p)


def help_text(chars: int) -> str:
    """The first `chars` characters of the help topics, one paragraph a line."""
    return "\n".join(help_paragraphs())[:chars]


def alphabet(texts) -> str:
    return "".join(sorted(set("".join(texts))))


def random_records(count: int, lengths: tuple[int, int], letters: str, rule, seed: int) -> list[dict]:
    """`count` distinct random texts over `letters`, of lengths in `lengths` (inclusive), labelled by `rule`."""
    rng, records = random.Random(seed), {}
    while len(records) < count:
        text = "".join(rng.choice(letters) for _ in range(rng.randint(*lengths)))
        records.setdefault(text, {"text": text, "label": rule(text)})
    return list(records.values())


def pad_rows(
    rows: list[torch.Tensor], width: int, value: int, dim: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-d id tensors to `width`: the padded ids and where they are real, stacked along `dim`."""
    ids = torch.stack([F.pad(row, (0, width - len(row)), value=value) for row in rows], dim)
    real = torch.stack([torch.arange(width) < len(row) for row in rows], dim)
    return ids, real


class SpecialsTokenizer:
    """One id per special token (`specials`, e.g. "<pad>", first) then one per character of `alphabet`.

    `encode` reads characters only (the pipeline adds the specials); `decode` shows a special by its name."""

    def __init__(self, alphabet: str, specials=("<pad>", "<bos>", "<eos>")):
        self.tokens = [*specials, *alphabet]
        self.index = {token: i for i, token in enumerate(self.tokens)}
        self.vocab_size = len(self.tokens)
        self.pad_id, self.bos_id, self.eos_id = (self.index.get(s) for s in ("<pad>", "<bos>", "<eos>"))

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.tokens[i] for i in ids)

    def fingerprint(self) -> str:
        return hashlib.sha256("\0".join(self.tokens).encode()).hexdigest()


class Examples(Dataset):
    """Items made ahead of time, beside the records they were made from."""

    def __init__(self, records: list[dict], items: list):
        self.records, self.items = records, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]

    def record(self, i: int) -> dict:
        return self.records[i]


class ForkData(pl.LightningDataModule):
    """What the datamodules here share: the constructor, setup once, map-style loaders (train shuffled)."""

    collate = None  # the default collate; padded datamodules define their own

    def __init__(self, length: int, batch_size: int = 8, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.length, self.batch_size, self.num_workers, self.seed = length, batch_size, num_workers, seed
        self.tokenizer = self.train_dataset = self.val_dataset = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_dataset is None:
            self.build()

    def build(self) -> None:
        raise NotImplementedError

    def loader(self, dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset, self.batch_size, shuffle=shuffle, num_workers=self.num_workers, collate_fn=self.collate
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_dataset, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val_dataset, shuffle=False)


# ---------------------------------------------------------------- correct ones


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


# ---------------------------------------------------------------- one planted mistake each


class PadCountedLM(PaddedLM):
    """BUG: the loss mask is all True, so predicting <pad> after the text is counted in the loss."""

    def collate(self, rows: list[torch.Tensor]) -> dict:
        batch = super().collate(rows)
        batch["loss_mask"] = torch.ones_like(batch["input_ids"], dtype=torch.bool)
        return batch


class PadCountedFromInputsLM(PaddedLM):
    """BUG: loss_mask = input_ids != pad_id, so the last real input, whose target is <pad>, is counted."""

    def collate(self, rows: list[torch.Tensor]) -> dict:
        batch = super().collate(rows)
        batch["loss_mask"] = batch["input_ids"] != self.tokenizer.pad_id
        return batch


class EosPaddedLM(PaddedLM):
    """BUG: pads with <eos> (pad_token = eos_token, no pad_id) and counts every position, runs of <eos> included."""

    specials = ("<bos>", "<eos>")

    def collate(self, rows: list[torch.Tensor]) -> dict:
        ids, _ = pad_rows(rows, self.length + 1, self.tokenizer.eos_id)
        return {
            "input_ids": ids[:, :-1],
            "targets": ids[:, 1:],
            "loss_mask": torch.ones_like(ids[:, 1:], dtype=torch.bool),
        }


class ValIsTrain(PaddedLM):
    """BUG: the validation dataset is the training dataset itself."""

    def build(self) -> None:
        super().build()
        self.val_dataset = self.train_dataset


class ValSliceOfTrain(FixedClassification):
    """BUG: the split index is off: val is records[size - val_size : size], the last val_size training records."""

    def split(self, records: list[dict]) -> tuple[list[dict], list[dict]]:
        return records[: self.size], records[self.size - self.val_size : self.size]


class Crops(Windows):
    """Windows of length + 1 tokens at the given start offsets (random crops)."""

    def __init__(self, text: str, tokens: torch.Tensor, length: int, starts: list[int]):
        super().__init__(text, tokens, length)
        self.starts = starts

    def __len__(self) -> int:
        return len(self.starts)

    def start(self, i: int) -> int:
        return self.starts[i]


class OverlappingWindowsLM(TextWindowsLM):
    """BUG: val is cut from `tokens` after it was rebound to the training part: val text is in the training crops."""

    def split(self, text: str, tokens: torch.Tensor) -> tuple[Dataset, Dataset]:
        cut = int(0.9 * len(tokens))
        n_val = len(tokens) - cut
        text, tokens = text[:cut], tokens[:cut]  # the training part
        generator = torch.Generator().manual_seed(self.seed)
        count = len(tokens) // (self.length + 1)
        starts = torch.randint(len(tokens) - self.length, (count,), generator=generator).tolist()
        val = self.windows(text[-n_val:], tokens[-n_val:], self.length)
        return Crops(text, tokens, self.length, starts), val


class SeededBatches(Sampler):
    """Random batches of indices drawn from a seed."""

    def __init__(self, size: int, batch_size: int, seed: int):
        self.size, self.batch_size, self.seed = size, batch_size, seed

    def __len__(self) -> int:
        return self.size // self.batch_size

    def __iter__(self):
        for _ in range(len(self)):
            generator = torch.Generator().manual_seed(self.seed)  # re-seeded for every batch
            yield torch.randperm(self.size, generator=generator)[: self.batch_size].tolist()


class SameBatchSampler(FixedClassification):
    """BUG: the train batch sampler re-seeds its generator for every batch, so every step gets the same batch."""

    def train_dataloader(self) -> DataLoader:
        sampler = SeededBatches(len(self.train_dataset), self.batch_size, self.seed)
        return DataLoader(self.train_dataset, batch_sampler=sampler, num_workers=self.num_workers)


class CursorWindows(Windows):
    """Windows read from a cursor (ported from a generator that advanced it)."""

    def __init__(self, text: str, tokens: torch.Tensor, length: int):
        super().__init__(text, tokens, length)
        self.cursor = 0

    def __getitem__(self, i: int) -> dict:
        start = self.start(self.cursor)  # the generator moved the cursor; nothing does here
        window = self.tokens[start : start + self.length + 1]
        return {
            "input_ids": window[:-1],
            "targets": window[1:],
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }


class IgnoresIndexDataset(TextWindowsLM):
    """BUG: __getitem__ reads the window at a cursor that never moves, whatever the index (record(i) is right)."""

    windows = CursorWindows


class LabelFirstClassification(FixedClassification):
    """BUG: the label is the target at position 0 and only position 0 is in the mask, before the text is read."""

    def encode(self, record: dict) -> dict:
        ids = torch.tensor(self.tokenizer.encode(record["text"]))
        targets, loss_mask = torch.zeros_like(ids), torch.zeros(self.length, dtype=torch.bool)
        targets[0], loss_mask[0] = (
            self.tokenizer.encode(record["label"])[0],
            True,
        )  # the label first, like [CLS]
        return {"input_ids": ids, "targets": targets, "loss_mask": loss_mask}


class LabelOffByOneClassification(PaddedClassification):
    """BUG: the label sits at the second-to-last real position, predicted before the last letter is read."""

    def label_positions(self, lengths: torch.Tensor) -> torch.Tensor:
        return lengths - 2  # the last position, minus one for the shift


class UnshardedWindows(StreamWindows):
    """A stream of windows that every worker reads whole."""

    def __iter__(self):
        for i in range(len(self)):
            yield self.item(i)


class UnshardedStreamingLM(StreamingLM):
    """BUG: the stream is not sharded by worker, so each of the 2 workers yields every window (each seen twice)."""

    stream = UnshardedWindows


class CharEosTokenizer(SpecialsTokenizer):
    """Characters first, then <eos> after them."""

    def __init__(self, alphabet: str):
        super().__init__(alphabet, specials=())
        self.eos_id = len(self.tokens)
        self.tokens.append("<eos>")  # vocab_size was counted before it


class EosEqualsVocabSize(StreamingLM):
    """BUG: the tokenizer's <eos> id equals vocab_size (which counts the characters only), out of the embedding's range."""

    def make_tokenizer(self, letters: str):
        return CharEosTokenizer(letters)


class TargetsAreInputsWindows(Windows):
    def __getitem__(self, i: int) -> dict:
        window = self.tokens[self.start(i) : self.start(i) + self.length]
        return {
            "input_ids": window,
            "targets": window,
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }


class TargetsAreInputsLM(TextWindowsLM):
    """BUG: the targets are the inputs themselves, not shifted by one."""

    windows = TargetsAreInputsWindows


class ShiftedByTwoWindows(Windows):
    def __len__(self) -> int:
        return (len(self.tokens) - 1) // (self.length + 1)  # one token to spare after the last window

    def __getitem__(self, i: int) -> dict:
        window = self.tokens[self.start(i) : self.start(i) + self.length + 2]
        return {
            "input_ids": window[:-2],
            "targets": window[2:],
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }


class ShiftedByTwoLM(TextWindowsLM):
    """BUG: the targets are the text shifted by two, so each position is trained on the token after next."""

    windows = ShiftedByTwoWindows


class LabelInInputClassification(FixedClassification):
    """BUG: input_ids are (text + label)[1:], so the label is the last input token; the targets are right."""

    def encode(self, record: dict) -> dict:
        ids = torch.tensor(self.tokenizer.encode(record["text"] + record["label"]))
        loss_mask = torch.zeros(self.length, dtype=torch.bool)
        loss_mask[-1] = True
        return {"input_ids": ids[1:], "targets": ids[1:], "loss_mask": loss_mask}


class TimeMajorCollate(PaddedLM):
    """BUG: the collate stacks rows along dim 1, so the batch is [time, batch]; shift and mask are right in it."""

    def collate(self, rows: list[torch.Tensor]) -> dict:
        ids, real = pad_rows(rows, self.length + 1, self.tokenizer.pad_id, dim=1)
        return {"input_ids": ids[:-1], "targets": ids[1:], "loss_mask": real[1:]}


class OtherVocabularyOrder(TextWindowsLM):
    """BUG: the tokens are encoded with the sorted alphabet but the tokenizer decodes in order of first appearance."""

    def build(self) -> None:
        text = help_text(self.chars)
        ids = {c: i for i, c in enumerate(sorted(set(text)))}
        self.tokenizer = CharTokenizer("".join(dict.fromkeys(text)))
        self.train_dataset, self.val_dataset = self.split(text, torch.tensor([ids[c] for c in text]))


class EmptyMaskWindows(Windows):
    def __getitem__(self, i: int) -> dict:
        window = self.tokens[self.start(i) : self.start(i) + self.length + 1]
        return {
            "input_ids": window[:-1],
            "targets": window[1:],
            "loss_mask": torch.zeros_like(window[1:], dtype=torch.bool),
        }


class EmptyLossMask(TextWindowsLM):
    """BUG: the loss mask is all False (zeros_like where ones_like was meant): no position is in the loss."""

    windows = EmptyMaskWindows


PRINTABLE = "".join(map(chr, range(32, 127)))  # id = code point - 32


class CodepointWindows(Windows):
    """Windows stored as code points, turned into ids (code point - 32) when read."""

    def __getitem__(self, i: int) -> dict:
        window = self.tokens[self.start(i) : self.start(i) + self.length + 1]
        window -= 32  # in place: a view of the stored code points
        return {
            "input_ids": window[:-1],
            "targets": window[1:],
            "loss_mask": torch.ones(self.length, dtype=torch.bool),
        }


class MutatingValLoader(TextWindowsLM):
    """BUG: __getitem__ subtracts the id offset in place on the stored code points, so every read changes them."""

    windows = CodepointWindows

    def build(self) -> None:
        text = help_text(self.chars).replace("\n", " ")  # printable ASCII only
        self.tokenizer = CharTokenizer(PRINTABLE)
        self.train_dataset, self.val_dataset = self.split(text, torch.tensor([ord(c) for c in text]))


# ---------------------------------------------------------------- what a second fork writes: other habits, correct
# or with one mistake each (Hugging Face's -100 and pad = eos, left padding, max-length padding, packing)


class HFStyleTokenizer(SpecialsTokenizer):
    """Hugging Face's names: `pad_token_id` (no pad_id); decode refuses an id it has no token for (-100)."""

    def __init__(self, alphabet: str, specials=("<pad>", "<bos>", "<eos>")):
        super().__init__(alphabet, specials)
        self.pad_token_id, self.pad_id = self.pad_id, None

    def decode(self, ids: list[int]) -> str:
        return (
            "".join(self.tokens[i] for i in ids)
            if all(0 <= i < self.vocab_size for i in ids)
            else self.refuse(ids)
        )

    def refuse(self, ids: list[int]) -> str:
        raise KeyError(next(i for i in ids if not 0 <= i < self.vocab_size))


class HFStylePaddedLM(PaddedLM):
    """Hugging Face's habits: the pad named pad_token_id, every target outside the mask -100."""

    def build(self) -> None:
        super().build()
        self.tokenizer = HFStyleTokenizer(self.tokenizer.tokens[3:])

    def collate(self, rows: list[torch.Tensor]) -> dict:
        batch = super().collate(rows)
        batch["targets"] = batch["targets"].masked_fill(~batch["loss_mask"], -100)
        return batch


class EosIsPadLM(PaddedLM):
    """GPT-2's habit: no pad token, padding by <eos>; each text's closing <eos> is a target, the padding is not."""

    specials = ("<bos>", "<eos>")

    def collate(self, rows: list[torch.Tensor]) -> dict:
        ids, real = pad_rows(rows, self.length + 1, self.tokenizer.eos_id)
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": real[:, 1:]}


class LeftPaddedLM(PaddedLM):
    """Padding on the left (as for generation), the pads out of the loss."""

    def collate(self, rows: list[torch.Tensor]) -> dict:
        flipped = [row.flip(0) for row in rows]
        ids, real = pad_rows(flipped, self.length + 1, self.tokenizer.pad_id)
        ids, real = ids.flip(1), real.flip(1)
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": real[:, 1:]}


class MaxLengthPaddedLM(PaddedLM):
    """Every example padded to length + 1 when read (max_length padding), the pads out of the loss."""

    def documents(self, documents: list[str]) -> Examples:
        examples = super().documents(documents)
        examples.items = [
            F.pad(row, (0, self.length + 1 - len(row)), value=self.tokenizer.pad_id) for row in examples.items
        ]
        return examples

    def collate(self, rows: list[torch.Tensor]) -> dict:
        ids = torch.stack(rows)
        real = ids != self.tokenizer.pad_id
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": real[:, 1:]}


class PackedLM(TextWindowsLM):
    """Documents joined by <eos> into one stream, one in three of them empty (runs of <eos>), cut into windows."""

    def build(self) -> None:
        lines = [line for line in help_text(self.chars).split(". ") if line]
        documents = [line if i % 3 else "" for i, line in enumerate(lines)]
        text = "\x00".join(documents)  # \x00 stands for <eos> in the text; the tokenizer's first character
        self.tokenizer = CharTokenizer(alphabet(text))
        self.tokenizer.eos_id = self.tokenizer.encode("\x00")[0]
        self.train_dataset, self.val_dataset = self.split(text, torch.tensor(self.tokenizer.encode(text)))


class MappingBatches(FixedClassification):
    """Batches in a mapping that is no dict (as transformers' BatchEncoding), with an extra numpy key."""

    def collate(self, items: list[dict]) -> UserDict:
        batch = UserDict(default_collate(items))
        batch["lengths"] = np.full(len(items), self.length)
        return batch


class NumpyCountTokenizer(CharTokenizer):
    """A tokenizer whose vocab_size is a numpy integer."""

    @property
    def vocab_size(self):
        return np.int64(len(self.alphabet))


class NumpyVocabSize(FixedClassification):
    """The tokenizer's vocab_size a numpy int64."""

    def build(self) -> None:
        super().build()
        self.tokenizer = NumpyCountTokenizer(self.letters + self.labels)


class TinyIIDLM(ForkData):
    """Random strings over 3 letters, 2 tokens each, 200 for training and 2 for validation: the splits share an
    example by chance as often as training repeats itself."""

    def build(self) -> None:
        self.tokenizer = CharTokenizer("abc")
        rng = random.Random(self.seed)
        texts = ["".join(rng.choice("abc") for _ in range(self.length + 1)) for _ in range(202)]
        self.train_dataset, self.val_dataset = (self.windows(texts[:200]), self.windows(texts[200:]))

    def windows(self, texts: list[str]) -> Examples:
        items = []
        for text in texts:
            ids = torch.tensor(self.tokenizer.encode(text))
            items.append(
                {
                    "input_ids": ids[:-1],
                    "targets": ids[1:],
                    "loss_mask": torch.ones(self.length, dtype=torch.bool),
                }
            )
        return Examples([{"text": t} for t in texts], items)


class EosNotLearnedLM(PaddedLM):
    """BUG: the closing <eos> is left out of the loss mask (mask = targets not in specials): the model never learns
    to end a text."""

    def collate(self, rows: list[torch.Tensor]) -> dict:
        batch = super().collate(rows)
        batch["loss_mask"] &= batch["targets"] != self.tokenizer.eos_id
        return batch


class EmptyValLoader(FixedClassification):
    """BUG: the validation loader copied from the training one, drop_last=True, with fewer examples than a batch."""

    def __init__(self, length: int, **kwargs):
        super().__init__(length, val_size=4, **kwargs)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_dataset, self.batch_size, drop_last=True)


class Int32Targets(FixedClassification):
    """BUG: the collate turns ids to int32 (from numpy), targets included: the loss indexes with int64."""

    def collate(self, items: list[dict]) -> dict:
        batch = default_collate(items)
        return {k: v.int() if k != "loss_mask" else v for k, v in batch.items()}


# ---------------------------------------------------------------- records that hold their padding, and the special
# tokens fine-tuning gets wrong (a BOS added twice, an end of text masked with the padding or left out): correct or
# with one mistake each


class PaddedRecordsLM(PaddedLM):
    """Every example padded to length + 1 when read, on `side`, with `pad_token()`; record(i) is the whole row
    decoded, its padding included ("<bos>Jump!<eos><pad><pad>..."). The padding is out of the loss."""

    side, room = "right", 0  # room: tokens a document is cut short of the row by, before the padding

    def pad_token(self) -> int:
        return self.tokenizer.pad_id

    def documents(self, documents: list[str]) -> Examples:
        examples = super().documents(documents)
        examples.items = [self.padded(row[: self.length + 1 - self.room]) for row in examples.items]
        examples.records = [{"text": self.tokenizer.decode(item["ids"].tolist())} for item in examples.items]
        return examples

    def padded(self, row: torch.Tensor) -> dict:
        room = self.length + 1 - len(row)
        sides = (room, 0) if self.side == "left" else (0, room)
        real = torch.ones_like(row, dtype=torch.bool)
        return {"ids": F.pad(row, sides, value=self.pad_token()), "real": F.pad(real, sides, value=False)}

    def collate(self, items: list[dict]) -> dict:
        ids, real = (torch.stack([item[key] for item in items]) for key in ("ids", "real"))
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "loss_mask": real[:, 1:]}


class CutThenPaddedLM(PaddedRecordsLM):
    """Documents cut 3 tokens short of the row, then every row padded to length + 1 (as padding to a round size
    does): a cut document is padded too, and ends without its <eos>, as a cut one does."""

    room = 3


class LeftPaddedRecordsLM(PaddedRecordsLM):
    """Padding on the left (as for generation), in the records too ("<pad><pad><bos>Jump!<eos>")."""

    side = "left"


class EosPaddedRecordsLM(PaddedRecordsLM):
    """GPT-2's habit, in the records too: no pad token, padded by <eos>; each text's closing <eos> in the loss."""

    specials = ("<bos>", "<eos>")

    def pad_token(self) -> int:
        return self.tokenizer.eos_id


class HFEosPadLM(EosPaddedRecordsLM):
    """Hugging Face's `pad_token = eos_token`: pad_token_id is the <eos> id; the first <eos> after each text is in the
    loss, the padding after it is not; every target outside the mask -100."""

    def build(self) -> None:
        super().build()
        self.tokenizer = HFStyleTokenizer(self.tokenizer.tokens[2:], self.specials)
        self.tokenizer.pad_token_id = self.tokenizer.eos_id

    def collate(self, items: list[dict]) -> dict:
        batch = super().collate(items)
        batch["targets"] = batch["targets"].masked_fill(~batch["loss_mask"], -100)
        return batch


class EosMaskedAsPadLM(HFEosPadLM):
    """BUG: the pad id is the <eos> id and the mask is `targets != pad_token_id`: every <eos>, the one that closes
    each text too, is out of the loss, so the model never learns to stop."""

    def collate(self, items: list[dict]) -> dict:
        batch = PaddedRecordsLM.collate(self, items)
        batch["loss_mask"] = batch["targets"] != self.tokenizer.pad_token_id
        batch["targets"] = batch["targets"].masked_fill(~batch["loss_mask"], -100)
        return batch


class PadCountedRecordsLM(PaddedRecordsLM):
    """BUG: the loss mask is all True, so predicting <pad> after the text is counted (the records hold the padding)."""

    def collate(self, items: list[dict]) -> dict:
        batch = super().collate(items)
        batch["loss_mask"] = torch.ones_like(batch["input_ids"], dtype=torch.bool)
        return batch


class SpacedTokenizer:
    """Decodes with a space between tokens, as tokenizers that write special tokens apart do ("[CLS] hi [PAD]")."""

    vocab_size, pad_id, bos_id, eos_id = 5, 0, 1, 2
    tokens = ("[PAD]", "[CLS]", "[SEP]", "hi", "yo")

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.tokens[i] for i in ids)


class AddsBosTokenizer(SpecialsTokenizer):
    """A tokenizer whose encode adds <bos> itself (Hugging Face's add_special_tokens=True)."""

    def encode(self, text: str) -> list[int]:
        return [self.bos_id, *super().encode(text)]


class DoubledBosLM(PaddedLM):
    """BUG: the tokenizer's encode adds <bos> and the template adds its own: every example starts <bos><bos>."""

    tokenizer_class = AddsBosTokenizer


class EosSometimesLM(PaddedLM):
    """BUG: the template appends <eos> only after a full stop (`if text.endswith(".")`): the texts that end in "!" or
    "?" never end, while every other one does."""

    def documents(self, documents: list[str]) -> Examples:
        tok = self.tokenizer
        rows = [
            ([tok.bos_id, *tok.encode(d)] + ([tok.eos_id] if d.endswith(".") else []))[: self.length + 1]
            for d in documents
        ]
        return Examples([{"text": tok.decode(row)} for row in rows], [torch.tensor(row) for row in rows])


class NoEosLM(PaddedLM):
    """Padded documents that never end: no <eos> is appended (a tokenizer that adds only a BOS, as Llama's does by
    default). Doubtful rather than wrong, as examples never meant to end are (a WARN, so not in BUGGY)."""

    def documents(self, documents: list[str]) -> Examples:
        tok = self.tokenizer
        rows = [[tok.bos_id, *tok.encode(d)][: self.length + 1] for d in documents]
        return Examples([{"text": tok.decode(row)} for row in rows], [torch.tensor(row) for row in rows])


CORRECT = {
    cls.__name__: cls
    for cls in (
        PaddedLM,
        PaddedClassification,
        FixedClassification,
        StreamingLM,
        TextWindowsLM,
        HFStylePaddedLM,
        EosIsPadLM,
        LeftPaddedLM,
        MaxLengthPaddedLM,
        PackedLM,
        MappingBatches,
        NumpyVocabSize,
        TinyIIDLM,
        PaddedRecordsLM,
        CutThenPaddedLM,
        LeftPaddedRecordsLM,
        EosPaddedRecordsLM,
        HFEosPadLM,
    )
}
BUGGY = {
    cls.__name__: cls
    for cls in (
        PadCountedLM,
        PadCountedFromInputsLM,
        EosPaddedLM,
        ValIsTrain,
        ValSliceOfTrain,
        OverlappingWindowsLM,
        SameBatchSampler,
        IgnoresIndexDataset,
        LabelFirstClassification,
        LabelOffByOneClassification,
        UnshardedStreamingLM,
        EosEqualsVocabSize,
        TargetsAreInputsLM,
        ShiftedByTwoLM,
        LabelInInputClassification,
        TimeMajorCollate,
        OtherVocabularyOrder,
        EmptyLossMask,
        MutatingValLoader,
        EosNotLearnedLM,
        EmptyValLoader,
        Int32Targets,
        PadCountedRecordsLM,
        EosMaskedAsPadLM,
        DoubledBosLM,
        EosSometimesLM,
    )
}


def build(cls, length: int = 16, **kwargs) -> pl.LightningDataModule:
    """A datamodule of `cls`, prepared and set up for fitting."""
    data = cls(length=length, **kwargs)
    data.prepare_data()
    data.setup("fit")
    return data
