"""Models a fork might write, used by tests: one that meets the contract, and broken ones."""

import torch
from torch import nn


class GRU(nn.Module):
    """A model from outside the package, plugged in with model=rnn model._target_=tests.fork_models.GRU."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 1, vectorize: bool = True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, d_model, num_layers=layers, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(self.token_embedding(input_ids))[0])


class PeekingGRU(GRU):
    """Breaks causality: every position also sees the next input."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        x = x + torch.roll(x, shifts=-1, dims=1)
        return self.head(self.gru(x)[0])


class UnusedParamRNN(nn.Module):
    """Two dead gradients: `unused` never takes part in forward, `head.bias` is frozen (requires_grad=False)."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 1, vectorize: bool = True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.rnn = nn.RNN(d_model, d_model, num_layers=layers, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size)
        self.head.bias.requires_grad_(False)
        self.unused = nn.Parameter(torch.zeros(d_model))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.token_embedding(input_ids))[0])


class BlowUp(nn.Module):
    """Passes its input through until its `after`-th training call, then emits inf."""

    def __init__(self, after: int):
        super().__init__()
        self.after, self.calls = after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
        return x * float("inf") if self.calls >= self.after else x


class ExplodingGRU(GRU):
    """A GRU whose hidden state turns infinite at the 6th training step."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 1, vectorize: bool = True):
        super().__init__(vocab_size, d_model, layers, vectorize)
        self.blowup = BlowUp(after=6)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blowup(self.gru(self.token_embedding(input_ids))[0]))
