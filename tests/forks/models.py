"""Models a fork might write, used by tests: one that meets the contract, and broken ones."""

import pytorch_lightning as pl
import torch
from torch import nn


class GRU(nn.Module):
    """A model from outside the package, plugged in with model=rnn model._target_=tests.forks.models.GRU."""

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


class SlowStep(nn.Module):
    """Waits `seconds` in every forward pass from the `after`-th one on while training: a step that takes that long
    (a very long sequence). It writes `marker` when its first long wait begins, for a test to signal then."""

    def __init__(self, seconds: float, after: int, marker: str):
        super().__init__()
        self.seconds, self.after, self.marker, self.calls = seconds, after, marker, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import pathlib
        import time

        self.calls += self.training
        if self.training and self.calls >= self.after:
            pathlib.Path(self.marker).write_text("slow step\n")
            time.sleep(self.seconds)
        return x


class SlowGRU(GRU):
    """A GRU whose training steps take 60 s each from the 3rd on; SLOW_MARKER names the file it writes then."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 1, vectorize: bool = True):
        import os

        super().__init__(vocab_size, d_model, layers, vectorize)
        self.slow = SlowStep(60.0, after=3, marker=os.environ["SLOW_MARKER"])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.slow(self.gru(self.token_embedding(input_ids))[0]))


class SlowValidation(pl.Callback):
    """A callback (+callbacks.slow_val) that makes every validation batch take `seconds` (a long validation pass),
    writing SLOW_MARKER as the first one of a run's validations begins."""

    def __init__(self, seconds: float = 2.0):
        self.seconds = seconds

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        import os
        import pathlib
        import time

        pathlib.Path(os.environ["SLOW_MARKER"]).write_text("slow validation\n")
        time.sleep(self.seconds)


class SlowEnd(pl.Callback):
    """A callback (+callbacks.slow_end) whose on_train_end takes 60 s, as the plots of a long run can; it writes
    SLOW_MARKER first."""

    def on_train_end(self, trainer, pl_module) -> None:
        import os
        import pathlib
        import time

        pathlib.Path(os.environ["SLOW_MARKER"]).write_text("slow end\n")
        time.sleep(60.0)


class KillAt(pl.Callback):
    """A callback (+callbacks.kill) that kills its own process outright (SIGKILL: nothing runs after it) as the
    hook `hook` begins once `step` optimizer steps are done: on_validation_start (right after that step's
    checkpoint, before its validation), on_train_batch_start (mid-training) or on_train_end."""

    def __init__(self, step: int, hook: str = "on_validation_start"):
        self.step, self.hook = step, hook

    def kill(self, trainer, hook: str) -> None:
        import os
        import signal

        if hook == self.hook and trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.kill(trainer, "on_validation_start")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.kill(trainer, "on_train_batch_start")


class StackAtFit(pl.Callback):
    """A callback (+callbacks.stack._target_=tests.forks.models.StackAtFit) that writes, as Trainer.fit starts, the
    harness functions on the call stack from the entry down (one `module.function` a line) to STACK_FILE."""

    def on_fit_start(self, trainer, pl_module) -> None:
        import os
        import pathlib
        import traceback

        package = pathlib.Path(__file__).resolve().parents[2] / "src" / "harness"
        frames = [
            f"{pathlib.Path(f.filename).relative_to(package).with_suffix('')}.{f.name}".replace("/", ".")
            for f in traceback.extract_stack()
            if pathlib.Path(f.filename).resolve().is_relative_to(package)
        ]
        pathlib.Path(os.environ["STACK_FILE"]).write_text("\n".join(frames) + "\n")


class CountedGRU(GRU):
    """A GRU that writes a line to $BUILDS_FILE each time it is built: how often the harness builds a fork's model,
    and where (the door must build none)."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 1, vectorize: bool = True):
        import os
        import traceback

        with open(os.environ["BUILDS_FILE"], "a") as f:
            door = any("harness/cli/overrides.py" in frame.filename for frame in traceback.extract_stack())
            f.write("door\n" if door else "run\n")
        super().__init__(vocab_size, d_model, layers, vectorize)
