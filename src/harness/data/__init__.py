"""Data: tokenizers, one on-disk format, its sources, and a corpus's token shards.

    tokenizer.py   the Tokenizer contract; char, a trained byte-level BPE, a tokenizer.json of your own
    format.py      the one dataset format on disk (meta.json, train.jsonl, val.jsonl), written atomically
    dataset.py     records -> Batch tensors, and the datamodule every built-in source shares
    batch.py       a split's first examples collated as its loader does, a batch moved to a device
    sampler.py     shuffling that a checkpoint resumes mid-epoch
    sources/       the built-in datamodules: synthetic, text, folder, corpus (and its windows)
    shards.py      a corpus tokenized into memory-mapped shards;   prepare.py   making them (no torch)
    integrity.py   whether a prepared corpus folder is whole;   rules.py   the data keys' ranges

Each datamodule is imported when first asked for (`harness.data.CorpusDataModule`): preparing a corpus
(`python -m harness.cli.prepare`) imports neither torch nor Lightning."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {
    "harness.data.dataset": ("CharDataset", "DiskDataModule"),
    "harness.data.sources.windows": ("CorpusDataModule",),
    "harness.data.sources.folder": ("FolderDataModule",),
    "harness.data.sources.synthetic": ("SyntheticDataModule",),
    "harness.data.sources.text": ("TextDataModule",),
    "harness.data.tokenizer": ("CharTokenizer", "HFTokenizer", "Tokenizer"),
}

__all__ = sorted(name for names in EXPORTS.values() for name in names)

__getattr__ = exported(EXPORTS)
