"""Data: tokenizers, one on-disk format, a synthetic generator, a text ingester, and token shards of a corpus.

    tokenizer.py   the Tokenizer contract; char, a trained byte-level BPE, a tokenizer.json of your own
    format.py      the one dataset format on disk (meta.json, train.jsonl, val.jsonl), written atomically
    dataset.py     records -> Batch tensors, and the datamodule every built-in source shares
    batch.py       a split's first examples collated as its loader does, a batch moved to a device
    synthetic.py   random sequences of any length (practice P9);  text.py   characters of a text file
    folder.py      a dataset folder of your own;  sampler.py   shuffling a checkpoint resumes mid-epoch
    corpus.py      a corpus of files: which files, where its shards go (no torch)
    shards.py      the corpus tokenized into shards, memory-mapped;  prepare.py   making them (no torch)
    integrity.py   whether a prepared corpus folder is whole (meta.json, every shard and its checksum)
    windows.py     the corpus's datamodule: windows of its token stream
    rules.py       the ranges of the data keys, checked at the door

Each datamodule is imported when first asked for (`harness.data.CorpusDataModule`): preparing a corpus
(`python -m harness.data.prepare`) imports neither torch nor Lightning."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {
    "harness.data.dataset": ("CharDataset", "DiskDataModule"),
    "harness.data.windows": ("CorpusDataModule",),
    "harness.data.folder": ("FolderDataModule",),
    "harness.data.synthetic": ("SyntheticDataModule",),
    "harness.data.text": ("TextDataModule",),
    "harness.data.tokenizer": ("CharTokenizer", "HFTokenizer", "Tokenizer"),
}

__all__ = sorted(name for names in EXPORTS.values() for name in names)

__getattr__ = exported(EXPORTS)
