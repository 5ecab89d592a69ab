"""x-transformers' decoder as a fork would wrap it behind the Model contract, and one bug planted in it."""

from __future__ import annotations

import types

import torch
from torch import nn

# ---------------------------------------------------------------------------------------------------------
# x-transformers: a third-party decoder behind the Model contract
# ---------------------------------------------------------------------------------------------------------


class XDecoder(nn.Module):
    """x-transformers' TransformerWrapper(Decoder) as a fork would wrap it: its own init (not GPT-2's),
    positions by option (`rotary`, `alibi` or `absolute`), `token_embedding` its token embedding. `dropout` sets
    its embedding, attention and feed-forward dropout; `layers`, `heads` and `vectorize` take the built-in
    transformer's keys, so `model=transformer model._target_=tests.forks.real_models.xdecoder.XDecoder` works."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 64,
        positions: str = "rotary",
        d_model: int = 32,
        layers: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        vectorize: bool = True,
        **kwargs,
    ):
        super().__init__()
        from x_transformers import Decoder, TransformerWrapper

        rates = {"attn_dropout": dropout, "ff_dropout": dropout} if dropout else {}
        self.net = TransformerWrapper(
            num_tokens=vocab_size,
            max_seq_len=max_len,
            use_abs_pos_emb=positions == "absolute",
            emb_dropout=dropout,
            attn_layers=Decoder(
                dim=d_model,
                depth=layers,
                heads=heads,
                rotary_pos_emb=positions == "rotary",
                alibi_pos_bias=positions == "alibi",
                **{**rates, **kwargs},
            ),
        )

    @property
    def token_embedding(self) -> nn.Module:
        return self.net.token_emb.emb

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.net(input_ids)


def branch_only(self, x: torch.Tensor, residual: torch.Tensor, **kwargs) -> torch.Tensor:
    """x-transformers' Residual.forward with the residual left out: the branch's output alone."""
    return x


def x_decoder_without_residual(vocab_size: int, length: int) -> XDecoder:
    """BUG: x-transformers' decoder whose Residual modules return the branch alone (an edited Residual.forward):
    every sublayer's output has lost its input."""
    from x_transformers.x_transformers import Residual

    model = XDecoder(vocab_size, max_len=length)
    for module in model.modules():
        if isinstance(module, Residual):
            module.forward = types.MethodType(branch_only, module)
    return model
