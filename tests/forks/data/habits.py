"""Correct DataModules written with a second fork's habits: Hugging Face's -100 targets and pad = eos, left and
max-length padding, packing, batches in a mapping, numpy counts, and records that hold their padding."""

from __future__ import annotations

import random
from collections import UserDict

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

from harness.data.tokenizer import CharTokenizer
from tests.forks.data.correct import (
    FixedClassification,
    PaddedLM,
    TextWindowsLM,
)
from tests.forks.data.parts import (
    Examples,
    ForkData,
    SpecialsTokenizer,
    alphabet,
    help_text,
    pad_rows,
)


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


class SpacedTokenizer:
    """Decodes with a space between tokens, as tokenizers that write special tokens apart do ("[CLS] hi [PAD]")."""

    vocab_size, pad_id, bos_id, eos_id = 5, 0, 1, 2
    tokens = ("[PAD]", "[CLS]", "[SEP]", "hi", "yo")

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.tokens[i] for i in ids)
