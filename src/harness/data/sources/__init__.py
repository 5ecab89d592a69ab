"""The built-in sources of data, each a datamodule written to the one format on disk.

synthetic.py   random sequences of any length (practice P9);   text.py   characters of a text file
folder.py      a dataset folder of your own;   corpus.py   a corpus of files: which, where its shards go (no torch)"""
