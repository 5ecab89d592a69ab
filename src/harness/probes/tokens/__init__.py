"""Probes of the examples as tokens.

datapoints.py   decoded examples: datapoints.jsonl;   logits.py   logit/ (p_correct.png)
embeddings.py   embeddings.png;   by_position.py   grad_by_position.png (reach.py)
reseed.py       inputs_identical"""
