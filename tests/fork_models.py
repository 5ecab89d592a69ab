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
