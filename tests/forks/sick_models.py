"""Models with a runtime illness, each one symptom's planted bug: they pass for working code, and train badly."""

import types

import torch
from torch import nn
from torch.nn import functional as F

from harness.models import GPT, HFCausalLM


class Stack(nn.Module):
    """token embedding -> `net` (a Sequential applied at every position) -> a linear head."""

    def __init__(self, vocab_size: int, d_model: int, net: nn.Sequential):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.net = net
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(self.token_embedding(input_ids)))


class DeepSigmoid(Stack):
    """`depth` Linear + Sigmoid layers: each divides the gradient by 4 or more on its way back."""

    def __init__(self, vocab_size: int, d_model: int = 32, depth: int = 10, **_):
        layers = [m for _ in range(depth) for m in (nn.Linear(d_model, d_model), nn.Sigmoid())]
        super().__init__(vocab_size, d_model, nn.Sequential(*layers))


class NegativeBiasReLU(Stack):
    """A ReLU layer whose bias is far below its inputs: every unit outputs exactly zero, always."""

    def __init__(self, vocab_size: int, d_model: int = 32, bias: float = -20.0, **_):
        super().__init__(vocab_size, d_model, nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU()))
        nn.init.constant_(self.net[0].bias, bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # a residual path keeps the head learning
        x = self.token_embedding(input_ids)
        return self.head(x + self.net(x))


class NegativeBiasSiLU(NegativeBiasReLU):
    """The same with a SiLU: its outputs are tiny negatives, never exactly zero, and its units as dead."""

    def __init__(self, vocab_size: int, d_model: int = 32, bias: float = -20.0, **_):
        super().__init__(vocab_size, d_model, bias)  # SiLU(-20) = -4e-8: far below 1e-6, not 0
        self.net[1] = nn.SiLU()


class SaturatedTanh(Stack):
    """A tanh layer whose weights are `scale` times too large: its outputs sit at -1 and 1."""

    def __init__(self, vocab_size: int, d_model: int = 32, scale: float = 30.0, **_):
        super().__init__(vocab_size, d_model, nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh()))
        with torch.no_grad():
            self.net[0].weight.mul_(scale)


class HugeInit(Stack):
    """`depth` Linear + GELU layers whose weights start `scale` times too large: without normalization, the
    gradient grows by that factor at every layer on its way back."""

    def __init__(self, vocab_size: int, d_model: int = 32, depth: int = 8, scale: float = 10.0, **_):
        layers = [m for _ in range(depth) for m in (nn.Linear(d_model, d_model), nn.GELU())]
        super().__init__(vocab_size, d_model, nn.Sequential(*layers))
        with torch.no_grad():
            for layer in self.net[::2]:
                layer.weight.mul_(scale)


class RecurringSpike(Stack):
    """A stable model whose training forwards `at` (call numbers) emit logits 30 times too large, inverted: the loss spikes,
    recovers, and spikes again (as a bad batch or an unstable layer makes it)."""

    def __init__(self, vocab_size: int, d_model: int = 32, at: tuple = (40, 41, 70, 71), **_):
        super().__init__(vocab_size, d_model, nn.Sequential(nn.Linear(d_model, d_model), nn.GELU()))
        self.at, self.calls = set(at), 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = super().forward(input_ids)
        if self.training and torch.is_grad_enabled():
            self.calls += 1
            if self.calls in self.at:
                return -30 * logits
        return logits


# the same illnesses where the activation is a function called in forward: no activation module to hook


class Layer(nn.Module):
    """Linear, then `activation` (a function, such as torch.tanh or F.relu) called in forward."""

    def __init__(self, d_model: int, activation):
        super().__init__()
        self.linear, self.activation = nn.Linear(d_model, d_model), activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


class FunctionalTanh(Stack):
    """SaturatedTanh with its tanh called as a function in `net`'s forward: weights `scale` times too large."""

    def __init__(self, vocab_size: int, d_model: int = 32, scale: float = 30.0, **_):
        super().__init__(vocab_size, d_model, nn.Sequential())
        self.net = Layer(d_model, torch.tanh)
        with torch.no_grad():
            self.net.linear.weight.mul_(scale)


class FunctionalReLU(Stack):
    """NegativeBiasReLU with its ReLU called as a function in `net`'s forward: every unit is zero, always."""

    def __init__(self, vocab_size: int, d_model: int = 32, bias: float = -20.0, **_):
        super().__init__(vocab_size, d_model, nn.Sequential())
        self.net = Layer(d_model, F.relu)
        nn.init.constant_(self.net.linear.bias, bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # a residual path keeps the head learning
        x = self.token_embedding(input_ids)
        return self.head(x + self.net(x))


class DeadReLUNet(nn.Module):
    """torch.relu called in the model's own forward, after a layer whose bias is -8: every unit is zero, always.
    Its class name says ReLU, as a fork's often does; it is no activation module for that (it holds layers)."""

    def __init__(self, vocab_size: int, d_model: int = 32, bias: float = -8.0, **_):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.linear, self.head = nn.Linear(d_model, d_model), nn.Linear(d_model, vocab_size)
        nn.init.constant_(self.linear.bias, bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # a residual path keeps the head learning
        x = self.token_embedding(input_ids)
        return self.head(x + torch.relu(self.linear(x)))


def saturated_rnn(vocab_size: int, d_model: int = 32, scale: float = 30.0, **_):
    """The built-in tanh RNN, its input weights `scale` times too large: its recurrence sits at -1 and 1."""
    from harness.models import RNN

    model = RNN(vocab_size, d_model=d_model)
    with torch.no_grad():
        model.recurrence.weight_ih_l0.mul_(scale)
    return model


def gpt2_mlp_with_tanh(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """GPT2MLP.forward with its activation module replaced by torch.tanh called in place."""
    return self.dropout(self.c_proj(torch.tanh(self.c_fc(hidden_states))))


class GPT2SaturatedTanh(HFCausalLM):
    """GPT-2 whose MLPs call torch.tanh in their forward, their input weights (c_fc) initialized with std `std`
    instead of 0.02: the tanh sits at -1 and 1."""

    def __init__(self, vocab_size: int, std: float = 5.0, **kwargs):
        super().__init__(vocab_size, **{**kwargs, "arch": "gpt2"})
        for block in self.lm.transformer.h:
            block.mlp.forward = types.MethodType(gpt2_mlp_with_tanh, block.mlp)
            nn.init.normal_(block.mlp.c_fc.weight, std=std)


def llama_mlp_with_relu(self, x: torch.Tensor) -> torch.Tensor:
    """LlamaMLP.forward with its activation module replaced by F.relu called in place."""
    return self.down_proj(F.relu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDeadReLU(HFCausalLM):
    """Llama (MLP biases on) whose MLPs call F.relu on the gate in their forward, the gate's bias at `bias`:
    every gate unit is zero, always."""

    def __init__(self, vocab_size: int, bias: float = -20.0, **kwargs):
        config = {**(kwargs.pop("config", None) or {}), "mlp_bias": True}
        super().__init__(vocab_size, **{**kwargs, "arch": "llama", "config": config})
        for layer in self.lm.model.layers:
            layer.mlp.forward = types.MethodType(llama_mlp_with_relu, layer.mlp)
            nn.init.constant_(layer.mlp.gate_proj.bias, bias)


class PoisonRow(torch.autograd.Function):
    """The identity; in the backward, row 1 of the gradient turns NaN."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor) -> torch.Tensor:
        return weight.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[1] = float("nan")
        return grad


class NaNInOneRow(Stack):
    """`trap` [2, d_model]: its gradient is NaN in its second row only, so that under two-way sharding (rows split
    between the ranks) only rank 1's slice holds the NaN; the forward stays finite."""

    def __init__(self, vocab_size: int, d_model: int = 32, **_):
        super().__init__(vocab_size, d_model, nn.Sequential(nn.Linear(d_model, d_model)))
        self.trap = nn.Parameter(torch.zeros(2, d_model))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.net(self.token_embedding(input_ids))
        return self.head(x + 0 * PoisonRow.apply(self.trap).sum(0))


class HalfUsed(Stack):
    """`pair` [2, d_model]: the forward reads its second row only, so its first row's gradient is always zero.
    Under two-way sharding rank 0's slice looks dead; the parameter is alive."""

    def __init__(self, vocab_size: int, d_model: int = 32, **_):
        super().__init__(vocab_size, d_model, nn.Sequential(nn.Linear(d_model, d_model)))
        self.pair = nn.Parameter(torch.zeros(2, d_model))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(self.token_embedding(input_ids)) + self.pair[1])


class LoudGPT(GPT):
    """A GPT whose init_weights() sets the final norm's gain to 50: logits fifty times too large at init (the
    init_loss row fails), whether the model is built whole or on the meta device and initialized once sharded."""

    def init_weights(self) -> None:
        super().init_weights()
        nn.init.constant_(self.norm.weight, 50.0)
