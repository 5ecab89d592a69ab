"""HFCausalLM: any Hugging Face causal LM architecture built from its config with random weights, behind the
Model contract, its forward called so that transformers copies nothing to the host; nothing is downloaded
(`python train.py model=hf model.arch=llama`). Needs `pip install -e '.[hf]'`."""

from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError

#: the architectures' defaults name special tokens by ids of a large vocabulary: ours have none of them, and
#: an id past the vocabulary breaks some architectures (a padding row that does not exist)
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")
#: the MLP width's name where the architecture does not map `intermediate_size` to its own key
FFN_KEYS = ("intermediate_size", "n_inner", "ffn_dim")
#: sdpa under a name transformers builds no mask for: its attention layers get none and run sdpa's own causal
#: path (`is_causal`), the one plain sdpa takes anyway when nothing is padded, packed or windowed
CAUSAL_SDPA = "sdpa_is_causal"
#: config keys whose window (a number of positions) narrows attention below causal: a mask is needed past it
WINDOWS = ("sliding_window", "attention_chunk_size")


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


def _mask_is_causal(config, max_len: int) -> bool:
    """Whether every mask transformers would build for `config` is the plain causal one, for inputs of up to
    `max_len` tokens that the wrapper passes no attention_mask or position_ids for: no window that can bite, no
    ALiBi bias read from the mask, no bidirectional attention."""
    windows = [getattr(config, key, None) for key in WINDOWS]
    narrow = any(isinstance(w, int) and not isinstance(w, bool) and 0 < w <= max_len for w in windows)
    return getattr(config, "is_causal", True) and not getattr(config, "alibi", False) and not narrow


def _skip_mask_building(lm, max_len: int) -> None:
    """Run sdpa's causal path without the mask transformers builds for it, where that is the same computation:
    building it checks on the host, one `bool()` a mask a forward, that the position ids show no packed documents
    (the wrapper passes none: they never do). Any other attention keeps its own (eager: see `forward`); a
    transformers without an attention registry (before 4.48) or `set_attn_implementation` runs sdpa as it is."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:
        return
    if not hasattr(lm, "set_attn_implementation"):
        return
    if lm.config._attn_implementation != "sdpa" or not _mask_is_causal(lm.config, max_len):
        return
    AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)  # transformers' registry: idempotent
    lm.set_attn_implementation(CAUSAL_SDPA)


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
        _skip_mask_building(self.lm, max_len)
        # eager builds its mask from a 2-D one without a host check; with none, it checks the position ids
        self.full_mask = self.lm.config._attn_implementation == "eager"

    @property
    def token_embedding(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = {"attention_mask": torch.ones_like(input_ids)} if self.full_mask else {}  # every token is real
        return self.lm(input_ids=input_ids, use_cache=False, **mask).logits
