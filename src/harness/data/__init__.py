"""Data: tokenizers, the on-disk format, its sources, a corpus's shards; datamodules load when first asked
for.

    tokenizer.py   the Tokenizer contract: char, a trained BPE, a tokenizer.json of yours
    format.py      the one dataset format on disk
    dataset.py     records -> Batch tensors; the datamodule the sources share
    batch.py       a split's first examples, collated as its loader does
    sampler.py     shuffling a checkpoint resumes mid-epoch
    sources/       the built-in datamodules (data=hf: any Hugging Face dataset, fine-tuning too)
    shards.py      a corpus's token shards;   prepare_corpus.py   making them (no torch)
    integrity.py   whether a prepared corpus is complete"""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {
    "harness.data.dataset": ("CharDataset", "DiskDataModule"),
    "harness.data.sources.corpus_datamodule": ("CorpusDataModule",),
    "harness.data.sources.hf_datamodule": ("HFDataModule",),
    "harness.data.sources.folder": ("FolderDataModule",),
    "harness.data.sources.synthetic": ("SyntheticDataModule",),
    "harness.data.sources.text": ("TextDataModule",),
    "harness.data.tokenizer": ("CharTokenizer", "HFTokenizer", "Tokenizer"),
}

__all__ = sorted(name for names in EXPORTS.values() for name in names)

__getattr__ = exported(EXPORTS)
