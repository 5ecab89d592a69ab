"""The built-in models' keys, each declared once (conf/model/*.yaml pick one and keep their comments): `Transformer`,
`RNN`, `LSTM`, `GPT` (its presets, SIZES), `HF`. A fork's model declares its own the same way, in a module
listed in DECLARING (docs/extending.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from harness.config.declare import key
from harness.errors import ConfigError

#: model=gpt's presets: size -> (d_model, layers, heads). Parameters outside the embeddings: 0.8M, 10.6M, 85M; in
#: all, with a 4096-token BPE and 256 positions: 1.35M, 12.3M; gpt2 with GPT-2's 50257 tokens and 1024: 124.4M
SIZES = {"tiny": (128, 4, 4), "small": (384, 6, 6), "gpt2": (768, 12, 12)}
# Each class is an open mapping (a dict subclass): a fork's model borrows a built-in's keys with
# model._target_=..., dropping one it does not take (~model.vectorize) or adding its own (+model.kernel=4)

#: model=gpt's position encodings
POSITIONS = ("learned", "rope")


def _heads_divide(node: DictConfig, d_model, heads) -> None:
    """A rule of every attention model: its width splits evenly over its heads."""
    if isinstance(d_model, int) and isinstance(heads, int) and heads >= 1 and d_model % heads:
        raise ConfigError("model.heads", heads, f"must divide model.d_model={d_model} (try model.heads=4)")


@dataclass
class Transformer(dict[str, Any]):
    """model=transformer: the small decoder-only transformer (harness.models.Transformer), the default."""

    _target_: str = "harness.models.Transformer"
    max_len: int = key("${data.length}", "positions the model can embed", low=1, whole=True)
    d_model: int = key(64, "width of the residual stream", low=1, whole=True)
    layers: int = key(2, "transformer blocks", low=1, whole=True)
    heads: int = key(4, "attention heads (d_model must divide by it)", low=1, whole=True)
    dropout: float = key(0.0, "the dropout probability", low=0.0, high=1.0)
    vectorize: bool = key(True, "false runs every twin's loop version (slow, the spec)")

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        _heads_divide(node, node.get("d_model"), node.get("heads"))


@dataclass
class RNN(dict[str, Any]):
    """model=rnn: a tanh RNN, the simple substitute (harness.models.RNN)."""

    _target_: str = "harness.models.RNN"
    d_model: int = key(128, "embedding and hidden-state width", low=1, whole=True)
    layers: int = key(1, "stacked recurrent layers", low=1, whole=True)
    vectorize: bool = key(True, "false runs the recurrence step by step in Python (the spec)")


@dataclass
class LSTM(RNN):
    """model=lstm: an LSTM, whose gates keep gradients alive over long sequences (harness.models.LSTM)."""

    _target_: str = "harness.models.LSTM"


@dataclass
class GPT(dict[str, Any]):
    """model=gpt: a GPT, nanoGPT style (harness.models.GPT), sized by preset, any of d_model/layers/heads
    overriding it."""

    _target_: str = "harness.models.GPT"
    size: str = key(
        "tiny", "the preset: tiny (128, 4 layers, 4 heads) | small (384, 6, 6) | gpt2", choices=tuple(SIZES)
    )
    d_model: int | None = key(None, "width of the residual stream; null: the preset's", low=1, whole=True)
    layers: int | None = key(None, "transformer blocks; null: the preset's", low=1, whole=True)
    heads: int | None = key(
        None, "attention heads (d_model must divide by it); null: the preset's", low=1, whole=True
    )
    positions: str = key("learned", "learned (an embedding of max_len positions) | rope", choices=POSITIONS)
    max_len: int = key("${data.length}", "positions the model can embed", low=1, whole=True)
    dropout: float = key(0.0, "embeddings, attention weights and both residual branches", low=0.0, high=1.0)
    bias: bool = key(True, "false: no bias in any Linear or LayerNorm")

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        preset = SIZES.get(node.get("size"), (None, None, None))
        d_model = node.get("d_model") if node.get("d_model") is not None else preset[0]
        heads = node.get("heads") if node.get("heads") is not None else preset[2]
        _heads_divide(node, d_model, heads)


@dataclass
class HF(dict[str, Any]):
    """model=hf: any Hugging Face causal LM architecture built from its config, random init
    (harness.models.HFCausalLM)."""

    _target_: str = "harness.models.HFCausalLM"
    arch: str = key("llama", "a transformers model type: llama | gpt2 | mistral | qwen2 | gpt_neox | ...")
    max_len: int = key(
        "${data.length}", "positions the model can embed (max_position_embeddings)", low=1, whole=True
    )
    d_model: int = key(64, "hidden_size: width of the residual stream", low=1, whole=True)
    layers: int = key(2, "num_hidden_layers", low=1, whole=True)
    heads: int = key(4, "num_attention_heads (d_model must divide by it)", low=1, whole=True)
    kv_heads: int | None = key(
        None, "num_key_value_heads (grouped-query attention); null: = heads", low=1, whole=True
    )
    ffn: int | None = key(None, "the MLP's inner width; null: 4 * d_model", low=1, whole=True)
    dropout: float = key(0.0, "every dropout rate of the architecture's config", low=0.0, high=1.0)
    attention: str | None = key(None, "eager | sdpa | null: transformers' attention implementation")
    config: Any = key(
        {}, "any other key of the architecture's own config, e.g. +model.config.rope_theta=500000"
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        _heads_divide(node, node.get("d_model"), node.get("heads"))


#: conf/model/<option>.yaml -> its declaration (ConfigStore: model/<option>_schema)
OPTIONS = {"transformer": Transformer, "rnn": RNN, "lstm": LSTM, "gpt": GPT, "hf": HF}
