"""Recurrent scans over time, written twice: torch's fused kernel, and the recurrence step by step.

Axes: b batch, time steps, features input width, hidden state width."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from harness.ops.twin import Twin


def _layer_weights(module: nn.RNNBase, layer: int):
    return (
        getattr(module, f"weight_ih_l{layer}"),
        getattr(module, f"weight_hh_l{layer}"),
        getattr(module, f"bias_ih_l{layer}"),
        getattr(module, f"bias_hh_l{layer}"),
    )


def _random_module(cls, generator, features, hidden, layers):
    module = cls(features, hidden, num_layers=layers, batch_first=True)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=generator) * 2 / hidden**0.5 - 1 / hidden**0.5)
    return module


class TanhScan(Twin):
    """h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), h_{-1} = 0, for each layer of an `nn.RNN`.

    x: [b, time, features], rnn: nn.RNN(batch_first=True) -> outputs of the last layer [b, time, hidden]"""

    test_shapes = (
        {"b": 1, "time": 1, "features": 3, "hidden": 4, "layers": 1},
        {"b": 2, "time": 9, "features": 5, "hidden": 6, "layers": 2},
        {"b": 3, "time": 20, "features": 8, "hidden": 8, "layers": 1},
    )
    bench_shape = {
        "b": 32,
        "time": 32,
        "features": 128,
        "hidden": 128,
        "layers": 1,
    }  # conf defaults, full mode

    def loop(self, x, rnn):
        for layer in range(rnn.num_layers):
            w_ih, w_hh, b_ih, b_hh = _layer_weights(rnn, layer)
            outputs = []
            for i in range(x.shape[0]):
                h = x.new_zeros(rnn.hidden_size)
                for t in range(x.shape[1]):
                    h = torch.tanh(w_ih @ x[i, t] + b_ih + w_hh @ h + b_hh)
                    outputs.append(h)
            x = rearrange(outputs, "(b time) hidden -> b time hidden", b=x.shape[0])
        return x

    def vectorized(self, x, rnn):
        return rnn(x)[0]

    @classmethod
    def example_inputs(cls, generator, b, time, features, hidden, layers):
        return torch.randn(b, time, features, generator=generator), _random_module(
            nn.RNN, generator, features, hidden, layers
        )


class LSTMScan(Twin):
    """The LSTM recurrence (gates i, f, g, o in torch's order), for each layer of an `nn.LSTM`.

    x: [b, time, features], lstm: nn.LSTM(batch_first=True) -> outputs of the last layer [b, time, hidden]"""

    test_shapes = TanhScan.test_shapes
    bench_shape = TanhScan.bench_shape

    def loop(self, x, lstm):
        for layer in range(lstm.num_layers):
            w_ih, w_hh, b_ih, b_hh = _layer_weights(lstm, layer)
            outputs = []
            for i in range(x.shape[0]):
                h = c = x.new_zeros(lstm.hidden_size)
                for t in range(x.shape[1]):
                    i_gate, f_gate, g_gate, o_gate = (w_ih @ x[i, t] + b_ih + w_hh @ h + b_hh).chunk(4)
                    c = torch.sigmoid(f_gate) * c + torch.sigmoid(i_gate) * torch.tanh(g_gate)
                    h = torch.sigmoid(o_gate) * torch.tanh(c)
                    outputs.append(h)
            x = rearrange(outputs, "(b time) hidden -> b time hidden", b=x.shape[0])
        return x

    def vectorized(self, x, lstm):
        return lstm(x)[0]

    @classmethod
    def example_inputs(cls, generator, b, time, features, hidden, layers):
        return torch.randn(b, time, features, generator=generator), _random_module(
            nn.LSTM, generator, features, hidden, layers
        )
