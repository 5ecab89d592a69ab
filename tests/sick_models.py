"""Models with a runtime illness, each one symptom's planted bug: they pass for working code, and train badly."""

import torch
from torch import nn


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
