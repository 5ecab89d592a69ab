"""Probes of the examples as tokens: what goes in, what comes out, and how far back the gradient reaches.

datapoints.py   decoded examples and predictions: datapoints.jsonl, wandb Table, TensorBoard text
logits.py       logit/p_correct, logit/entropy, logit/top1 (and p_correct.png in overfit mode)
embeddings.py   a 2-D projection of the token embeddings: embeddings.png
by_position.py  the input gradient by position: grad_by_position.png (reach.py measures it)
reseed.py       hashes proving every overfit step saw the same inputs: inputs_identical"""
