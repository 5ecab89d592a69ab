"""The data (harness.data): tokenizers, the on-disk format, loaders, the corpus and its cache, damaged datasets."""
