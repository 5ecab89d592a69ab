"""Data: tokenizers, one on-disk format, a synthetic generator, a text ingester, and token shards of a corpus."""

from harness.data.corpus import CorpusDataModule
from harness.data.dataset import CharDataset, DiskDataModule
from harness.data.folder import FolderDataModule
from harness.data.synthetic import SyntheticDataModule
from harness.data.text import TextDataModule
from harness.data.tokenizer import CharTokenizer, HFTokenizer, Tokenizer

__all__ = [
    "CharDataset",
    "CharTokenizer",
    "CorpusDataModule",
    "DiskDataModule",
    "FolderDataModule",
    "HFTokenizer",
    "SyntheticDataModule",
    "TextDataModule",
    "Tokenizer",
]
