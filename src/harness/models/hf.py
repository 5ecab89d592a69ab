"""HFCausalLM: any Hugging Face causal LM architecture built from its config with random weights, behind the
Model contract; nothing is downloaded (`python train.py model=hf model.arch=llama`). Needs `pip install -e
'.[hf]'`."""

from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError

#: the architectures' defaults name special tokens by ids of a large vocabulary: ours have none of them, and
#: an id past the vocabulary breaks some architectures (a padding row that does not exist)
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")
#: the MLP width's name where the architecture does not map `intermediate_size` to its own key
FFN_KEYS = ("intermediate_size", "n_inner", "ffn_dim")


def _architecture_config(arch: str, sizes: dict, dropout: float, extra: dict):
    """The `transformers` config of `arch`: `sizes` under the usual keys (each architecture maps them to its
    own), every dropout rate `dropout`, and `extra` (its own keys, each checked to exist)."""
    try:
        from transformers import CONFIG_MAPPING, AutoConfig
    except ImportError:
        raise ConfigError(
            "model.arch", arch, "needs Hugging Face transformers: pip install -e '.[hf]' (make install does)"
        ) from None
    if arch not in CONFIG_MAPPING:
        raise ConfigError(
            "model.arch", arch, "not a transformers model type; try gpt2, llama, mistral, qwen2 or gpt_neox"
        )
    defaults = CONFIG_MAPPING[arch]()
    known = set(defaults.to_dict()) | set(getattr(defaults, "attribute_map", {}))
    for key, value in extra.items():
        if key not in known:
            raise ConfigError(
                f"model.config.{key}", value, f"{arch}'s config has no such key; check its spelling"
            )
    values = {key: None for key in SPECIAL_TOKENS if key in known}
    values.update({key: dropout for key in known if key.endswith(("dropout", "pdrop"))})
    values.update({key: value for key, value in sizes.items() if key in known})
    ffn = next((key for key in FFN_KEYS if key in known), None)
    if ffn is not None and sizes.get("intermediate_size") is not None:
        values[ffn] = sizes["intermediate_size"]
    head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
    if isinstance(getattr(defaults, "rotary_dim", None), int) and defaults.rotary_dim > head_dim:
        values["rotary_dim"] = head_dim  # GPT-J, CodeGen: rotary dimensions past a small head do not exist
    return AutoConfig.for_model(arch, **{**values, **extra})


class HFCausalLM(nn.Module):
    """A `transformers` causal LM of architecture `arch`, random init. input_ids Long[b, time] ->
    logits [b, time, vocab_size]. `token_embedding` is the architecture's input embedding."""

    def __init__(
        self,
        vocab_size: int,
        arch: str = "llama",
        max_len: int = 64,
        d_model: int = 64,
        layers: int = 2,
        heads: int = 4,
        kv_heads: int | None = None,
        ffn: int | None = None,
        dropout: float = 0.0,
        attention: str | None = None,
        config: dict | None = None,
    ):
        super().__init__()
        from transformers import AutoModelForCausalLM

        sizes = {
            "vocab_size": vocab_size,
            "hidden_size": d_model,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads or heads,
            "max_position_embeddings": max_len,
            "intermediate_size": ffn or 4 * d_model,
        }
        hf_config = _architecture_config(arch, sizes, dropout, dict(config or {}))
        chosen = (
            {} if attention is None else {"attn_implementation": attention}
        )  # None: the architecture's own
        self.lm = AutoModelForCausalLM.from_config(hf_config, **chosen)
        self.architecture = type(self.lm).__name__  # what the verdict names the model by

    @property
    def token_embedding(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits
