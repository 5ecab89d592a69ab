"""The preflight on real LLM code (tests/forks/real_models/): no false alarm on correct models, planted bugs
stopped, overfit runs through train.py, packed documents kept apart."""
