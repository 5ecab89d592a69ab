"""The data checks: what a fork's batches and tokenizer must satisfy, read through its own loaders.

reads.py             DataReads: the loaders' first batches and a sample of each split, read once for every check
batch_format.py      batch_format, ids_in_range; sample_rows (the batch the model checks run on)
loss_mask.py         loss_mask: what the loss sees
roundtrip.py         data_roundtrip, static_batches;   roundtrip_causes.py   why a row is not its source
special_tokens.py    special_tokens (BOS, end of text);   split_overlap.py   split_overlap
loaders.py           train_loader, epoch_order"""
