"""Hugging Face models (harness.models.HFCausalLM) small enough for a test: the correct variants a preflight must
let through (GPT-2 with zeroed residual projections) and realistic bugs planted one at a time, before the
embedding where no hook inside the model can see them, or in one layer or tensor."""

from __future__ import annotations

import types

import torch
from torch import nn

from harness.models import HFCausalLM

# ---------------------------------------------------------------------------------------------------------
# correct variants a preflight must NOT flag
# ---------------------------------------------------------------------------------------------------------


def hf(vocab_size: int, arch: str, length: int, **kwargs) -> HFCausalLM:
    """A small HFCausalLM (d_model 32, 2 layers, 4 heads) for inputs of `length` tokens."""
    sizes = dict(d_model=32, layers=2, heads=4)
    return HFCausalLM(vocab_size, arch=arch, max_len=length, **{**sizes, **kwargs})


def gpt2_zeroed_c_proj(vocab_size: int, length: int, dropout: float = 0.0) -> HFCausalLM:
    """NOT a bug: GPT-2 whose every residual projection (attn.c_proj, mlp.c_proj), weight and bias, is zero,
    as zero-init / ReZero-style schemes start. Gradients reach the blocks' inner weights after one step."""
    model = hf(vocab_size, "gpt2", length, dropout=dropout)
    with torch.no_grad():
        for block in model.lm.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
    return model


# ---------------------------------------------------------------------------------------------------------
# planted bugs in Hugging Face models (before the embedding: what no hook inside the model can see)
# ---------------------------------------------------------------------------------------------------------


class RollInputs(HFCausalLM):
    """BUG: forward rolls input_ids by -1 along time before the model: position t reads token t+1, its own
    target. A leak before the embedding."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids.roll(-1, dims=1))


class SecondEmbedding(HFCausalLM):
    """BUG: a second embedding (`next_embedding`) of the NEXT token ids is added to the token embeddings and
    fed through inputs_embeds: a second path from the ids that leaks the future."""

    def __init__(self, vocab_size: int, **kwargs):
        super().__init__(vocab_size, **kwargs)
        self.next_embedding = nn.Embedding(vocab_size, self.lm.config.hidden_size)
        nn.init.normal_(self.next_embedding.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.token_embedding(input_ids) + self.next_embedding(input_ids.roll(-1, dims=1))
        return self.lm(inputs_embeds=embeds, use_cache=False).logits


class BatchRollInputs(HFCausalLM):
    """BUG: input_ids are mixed across the examples of the batch before the model (each example's ids are
    offset by the previous example's): a batch leak before the embedding."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mixed = (input_ids + input_ids.roll(1, dims=0)) % self.lm.config.vocab_size
        return super().forward(mixed)


class HFLogOfSoftmax(HFCausalLM):
    """BUG: a wrapper of a Hugging Face model that returns log(softmax(logits)) as its output: -inf once a
    probability underflows."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.softmax(super().forward(input_ids), dim=-1))


def attention_scaled_up(vocab_size: int, length: int, arch: str = "llama", d_model: int = 256) -> HFCausalLM:
    """BUG: a Hugging Face model (d_model 256, 4 heads of 64) whose attention modules scale their scores by
    sqrt(head_dim) instead of 1/sqrt(head_dim) (`self.scaling = self.head_dim ** 0.5`, as an edited copy of
    the attention class would)."""
    model = hf(vocab_size, arch, length, d_model=d_model)
    for module in model.modules():
        if hasattr(module, "scaling") and hasattr(module, "head_dim"):
            module.scaling = module.head_dim**0.5
    return model


def llama_layer_without_attention_residual(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
    """LlamaDecoderLayer.forward with `hidden_states = residual + hidden_states` after attention left out."""
    hidden_states, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
    residual = hidden_states
    return residual + self.mlp(self.post_attention_layernorm(hidden_states))


def llama_without_attention_residual(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama whose decoder layers drop the attention's residual connection (an edited copy of
    LlamaDecoderLayer.forward): each layer's output has lost its input."""
    model = hf(vocab_size, "llama", length)
    for layer in model.lm.model.layers:
        layer.forward = types.MethodType(llama_layer_without_attention_residual, layer)
    return model


def frozen(model: nn.Module, name: str) -> nn.Module:
    """`model` with parameter `name` frozen (requires_grad=False)."""
    model.get_parameter(name).requires_grad_(False)
    return model


def frozen_head(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama (untied) whose output head lm.lm_head.weight is frozen: the logits' own layer never learns."""
    return frozen(hf(vocab_size, "llama", length), "lm.lm_head.weight")


def frozen_tied_head(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: GPT-2 whose output head is frozen; tied to the token embedding, it freezes both."""
    return frozen(hf(vocab_size, "gpt2", length), "lm.lm_head.weight")


def frozen_embedding(vocab_size: int, length: int) -> HFCausalLM:
    """BUG: Llama whose token embedding lm.model.embed_tokens.weight is frozen: the tokens never learn."""
    return frozen(hf(vocab_size, "llama", length), "lm.model.embed_tokens.weight")


#: a non-essential tensor: one block's input RMSNorm gain
FROZEN_NORM = "lm.model.layers.0.input_layernorm.weight"


def frozen_norm(vocab_size: int, length: int) -> HFCausalLM:
    """SUSPICIOUS (a WARN, not a FAIL): Llama with one RMSNorm gain frozen; the model still learns, but a
    frozen tensor is usually an accident (a leftover of fine-tuning code)."""
    return frozen(hf(vocab_size, "llama", length), FROZEN_NORM)
