"""DataModules with one planted data-pipeline mistake each, in the pipelines of correct.py: a loss mask that
counts padding, validation drawn from training, a sampler that repeats one batch, unsharded streams, targets
that are the inputs, and more. Each says its mistake in its docstring, after "BUG:"; everything else is right."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from harness.data.tokenizer import CharTokenizer
from tests.forks.data.correct import (
    FixedClassification,
    PaddedClassification,
    PaddedLM,
    StreamingLM,
    StreamWindows,
    TextWindowsLM,
    Windows,
)
from tests.forks.data.parts import (
    SpecialsTokenizer,
    help_text,
    pad_rows,
)


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
