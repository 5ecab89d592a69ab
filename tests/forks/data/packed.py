"""Packed documents as a fork packs them: text documents joined by an end-of-text token into one stream, cut into
windows, each batch declaring its documents (`document_ids`, the Batch contract's optional key). The model that
keeps them apart is in tests/forks/real_models/ (DocumentMaskedMiniGPT)."""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

from harness.data import CharTokenizer
from tests.forks.data.habits import PackedLM
from tests.forks.data.parts import alphabet, help_text


def document_ids(input_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """One id per position, counting the documents of each row from 0: an end-of-text belongs to the document it
    ends, the next position starts another."""
    ends = (input_ids == eos_id).long()
    return ends.cumsum(dim=-1) - ends


class DeclaredPackedLM(PackedLM):
    """Short documents (two to four words of Python's help topics) joined by <eos> into one stream, cut into
    windows, its batches declaring their documents: several in every window."""

    def build(self) -> None:
        words = help_text(self.chars).split()
        documents, start = [], 0
        while start < len(words):
            size = 2 + len(documents) % 3
            documents.append(" ".join(words[start : start + size]))
            start += size
        text = "\x00".join(documents)  # \x00 stands for <eos> in the text; the tokenizer's first character
        self.tokenizer = CharTokenizer(alphabet(text))
        self.tokenizer.eos_id = self.tokenizer.encode("\x00")[0]
        self.train_dataset, self.val_dataset = self.split(text, torch.tensor(self.tokenizer.encode(text)))

    def collate(self, items: list[dict]) -> dict:
        batch = default_collate(items)
        batch["document_ids"] = document_ids(batch["input_ids"], self.tokenizer.eos_id)
        return batch
