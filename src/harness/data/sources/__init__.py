"""The built-in datamodules, each writing or reading the one format on disk.

synthetic.py   random sequences;   text.py   a text file's characters;   folder.py   a dataset folder of yours
corpus.py      a corpus of files (no torch);   corpus_datamodule.py   the datamodule of token shards
hf_shards.py   any Hugging Face dataset, into shards (no torch);   finetune.py   fine-tuning's examples
hf_datamodule.py   data=hf's datamodule: its shards, or the dataset as a stream"""
