"""Built-in models. Each meets the Model contract of docs/contracts.md: built with `vocab_size` injected,
`forward(input_ids Long[b, time]) -> logits [b, time, vocab]`, causal, with a `token_embedding`."""

from harness.models.gpt import GPT
from harness.models.hf import HFCausalLM
from harness.models.recurrent import LSTM, RNN
from harness.models.transformer import Transformer

__all__ = ["GPT", "HFCausalLM", "LSTM", "RNN", "Transformer"]
