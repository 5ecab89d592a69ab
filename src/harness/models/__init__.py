"""Built-in models. Each meets the Model contract of docs/contracts.md: built with `vocab_size` injected,
`forward(input_ids Long[b, time]) -> logits [b, time, vocab]`, causal, with a `token_embedding`.

    transformer.py   the small transformer (the default); its attention is harness.ops.CausalAttention
    recurrent.py     RNN and LSTM, the simple substitutes (harness.ops's scans)
    gpt.py           a real GPT (nanoGPT's shape, sizes tiny to GPT-2 small)
    hf.py            any Hugging Face causal LM architecture, random init
    rules.py         the ranges of their keys, checked at the door

Each is imported when first asked for (`harness.models.GPT`): the door reads rules.py without torch."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {
    "harness.models.gpt": ("GPT",),
    "harness.models.hf": ("HFCausalLM",),
    "harness.models.recurrent": ("LSTM", "RNN"),
    "harness.models.transformer": ("Transformer",),
}

__all__ = sorted(name for names in EXPORTS.values() for name in names)

__getattr__ = exported(EXPORTS)
