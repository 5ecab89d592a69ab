"""Recurrent language models: the simple substitute for the transformer, same interface.

Axes: b batch, time steps, hidden state width."""

from __future__ import annotations

import torch
from torch import nn

from harness.ops import LSTMScan, TanhScan


class RNN(nn.Module):
    """A tanh RNN: embedding -> recurrence -> linear head. input_ids Long[b, time] -> logits [b, time, vocab]."""

    cell, scan = nn.RNN, TanhScan

    def __init__(self, vocab_size: int, d_model: int = 64, layers: int = 1, vectorize: bool = True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.recurrence = self.cell(d_model, d_model, num_layers=layers, batch_first=True)
        self.scan_over_time = self.scan(vectorize)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.scan_over_time(self.token_embedding(input_ids), self.recurrence)
        return self.head(hidden)


class LSTM(RNN):
    """The same model with LSTM cells: gates keep the gradient alive over long distances."""

    cell, scan = nn.LSTM, LSTMScan
