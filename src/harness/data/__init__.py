"""Data: a character tokenizer, one on-disk format, a synthetic generator and a text ingester."""

from harness.data.dataset import CharDataset, DiskDataModule
from harness.data.folder import FolderDataModule
from harness.data.synthetic import SyntheticDataModule
from harness.data.text import TextDataModule
from harness.data.tokenizer import CharTokenizer

__all__ = [
    "CharDataset",
    "CharTokenizer",
    "DiskDataModule",
    "FolderDataModule",
    "SyntheticDataModule",
    "TextDataModule",
]
