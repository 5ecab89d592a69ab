"""The signal gate itself (harness.signals), in one process: a signal raises at once, waits for a step to end, and
a repeat raises; a signal inside a held import; long data generation and a long preflight announced ahead."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest
import torch

from harness.errors import ConfigError
from harness.signals import Held, Interrupted, SignalGate, raise_received

# --- in-process: the gate itself ----------------------------------------------------------------------------


def test_gate_raises_at_once_defers_in_a_step_and_a_repeat_raises(monkeypatch):
    gate = SignalGate()
    with pytest.raises(Interrupted) as stop:
        gate.handle(signal.SIGTERM, None)
    assert stop.value.signum == signal.SIGTERM and gate.received == signal.SIGTERM
    step = SignalGate(deferring=True)
    step.handle(signal.SIGINT, None)  # inside a training step: noted, the step goes on
    assert step.received == signal.SIGINT
    step.handle(signal.SIGINT, None)  # the same Ctrl-C, passed on by a sweep's main process: not a second one
    monkeypatch.setattr(step, "_first_at", time.monotonic() - 2)
    with pytest.raises(Interrupted):  # a second signal: at once
        step.handle(signal.SIGTERM, None)
    held = SignalGate(holding=True)
    held.handle(signal.SIGTERM, None)  # writing the verdict: only noted
    assert held.received == signal.SIGTERM


def test_a_signal_inside_a_held_import_is_raised_after_it_and_a_lost_one_before_the_job():
    """Torch's import calls back into Python from C++: a handler raising there aborts the process (a pybind11
    error nobody catches) or leaves it to crash at exit. Held notes it and raises once the import is done; a
    signal a library's `except Exception` swallowed is raised by raise_received before the job starts."""
    gate = SignalGate()
    gate.install()
    try:
        with pytest.raises(Interrupted) as stop, Held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside: noted only
            survived = True
        assert survived and stop.value.signum == signal.SIGTERM and not gate.holding
        lost = SignalGate()
        lost.install()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        except Interrupted:  # what a C import turned into another exception, and a fallback swallowed
            pass
        with pytest.raises(Interrupted) as again:
            raise_received()
        assert again.value.signum == signal.SIGINT
        lost.restore()
    finally:
        gate.restore()
    raise_received()  # no gate of harness's: nothing to raise


def test_dataset_too_big_for_memory_is_refused_naming_the_key():
    from harness.data.sources.synthetic import SyntheticDataModule

    with pytest.raises(ConfigError, match=r"data\.length=.*GiB of memory.*lower data\.length or data\.size"):
        SyntheticDataModule(length=10**9, size=1000)
    SyntheticDataModule(length=64, size=1000)  # an ordinary one is not


def test_long_generation_is_announced_with_an_estimate(tmp_path, caplog):
    from harness.data.sources import synthetic

    data = synthetic.SyntheticDataModule(length=40, size=9, val_size=1, root=str(tmp_path))
    with caplog.at_level("WARNING"):
        data.build()
    assert not caplog.records, "a quick one is not announced"
    with caplog.at_level("WARNING"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(synthetic, "TOKENS_PER_S", 10)  # 400 tokens at 10 a second: 40 s
        data.build()
    assert "generating 10 examples of 40 tokens: about 40 s" in caplog.text


class Sleepy(torch.nn.Module):
    """A model whose forward takes `seconds`: the preflight's unit of time, made long."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.embedding = seconds, torch.nn.Embedding(8, 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.embedding(input_ids)


def test_a_long_preflight_is_announced_with_its_estimate(monkeypatch, caplog):
    from harness.checks import preflight

    batch = {"input_ids": torch.zeros(4, 16, dtype=torch.long)}
    caplog.set_level(logging.WARNING, logger="harness.checks.preflight")
    assert preflight.announce(Sleepy(0.0), batch) < preflight.ANNOUNCE_S and not caplog.records
    monkeypatch.setattr(preflight, "ANNOUNCE_S", 0.2)
    estimate = preflight.announce(Sleepy(0.05), batch)
    assert estimate >= preflight.PASSES * 0.05
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"preflight: about {estimate:.0f} s ahead (6 passes over 4 examples of 16 tokens")
    assert "preflight=false skips it" in line
