"""The data checks: what a fork's batches and tokenizer must satisfy, read through its own loaders.

reads.py             DataReads: read once for every check
batch_format.py      batch_format, ids_in_range; sample_rows
loss_mask.py         loss_mask
special_tokens.py    special_tokens
roundtrip.py         data_roundtrip, static_batches
roundtrip_causes.py  the causes data_roundtrip names
split_overlap.py     split_overlap
loaders.py           train_loader, epoch_order
val_order.py         val_order"""
