"""What the fork datamodules share: the texts they are made of, a tokenizer with special tokens, a dataset of
examples made ahead, the base DataModule, and `build(cls, length)`, which makes one ready to use.

Self-contained: torch, pytorch_lightning and the standard library, nothing downloaded (the real text is Python's
own help topics, `pydoc_data`, shipped with CPython)."""

from __future__ import annotations

import functools
import hashlib
import random

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

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


def build(cls, length: int = 16, **kwargs) -> pl.LightningDataModule:
    """A datamodule of `cls`, prepared and set up for fitting."""
    data = cls(length=length, **kwargs)
    data.prepare_data()
    data.setup("fit")
    return data
