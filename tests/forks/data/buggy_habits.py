"""DataModules with one planted mistake each in the habits of habits.py and in the special tokens fine-tuning gets
wrong (an end of text left out of the loss or masked with the padding, a BOS added twice); and one that is
doubtful rather than wrong (NoEosLM: a WARN). Each mistake is said in its docstring, after "BUG:"."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, default_collate

from tests.forks.data.correct import (
    FixedClassification,
    PaddedLM,
)
from tests.forks.data.habits import HFEosPadLM, PaddedRecordsLM
from tests.forks.data.parts import (
    Examples,
    SpecialsTokenizer,
)


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
