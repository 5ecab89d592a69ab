"""Built-in models meeting the Model contract, each loaded when first asked for (`harness.models.GPT`).

transformer.py   the small transformer (the default)
recurrent.py     RNN and LSTM
gpt.py           a real GPT, tiny to GPT-2 small
hf_causal_lm.py  any Hugging Face causal LM architecture, random init

Their keys are declared in harness.config.groups.model."""

from __future__ import annotations

from harness import exported

#: module -> the names it defines
EXPORTS = {
    "harness.models.gpt": ("GPT",),
    "harness.models.hf_causal_lm": ("HFCausalLM",),
    "harness.models.recurrent": ("LSTM", "RNN"),
    "harness.models.transformer": ("Transformer",),
}

__all__ = sorted(name for names in EXPORTS.values() for name in names)

__getattr__ = exported(EXPORTS)
