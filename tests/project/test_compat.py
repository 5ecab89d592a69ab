"""Every private API of another library the harness uses still works, through harness.compat alone; when one
changes, the failure names the library and its version."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from harness import compat

SRC = Path(__file__).resolve().parents[2] / "src" / "harness"
#: the private names compat.py wraps: they appear in no other file of the package
PRIVATE = (
    "_logger_connector",
    "_get_file_writer",
    "_rewrite_with_new_header",
    "hydra._internal",
    "_shutdown_workers",
    "_should_check_val_fx",
    "_data_fetcher",
    "epoch_loop.val_loop.batch_progress",
    "DisableTorchFunction",
    "_composable",
    "_python_dispatch",
)


def test_private_apis_appear_only_in_the_compat_module():
    found = {
        str(path.relative_to(SRC)): [name for name in PRIVATE if name in path.read_text()]
        for path in SRC.rglob("*.py")
        if path.name != "compat.py"
    }
    assert not {k: v for k, v in found.items() if v}, found


def test_lightning_logs_now_follows_log_every_n_steps(tmp_path):
    seen = []

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(compat.lightning_logs_now(trainer))

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def training_step(self, batch, batch_idx):
            return (self.w * batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        max_steps=6,
        log_every_n_steps=3,
        callbacks=[Watch()],
        logger=pl.loggers.CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), train_dataloaders=torch.utils.data.DataLoader(torch.ones(6, 1), batch_size=1))
    assert seen == [False, False, True, False, False, True], seen


def test_tensorboard_file_writer_takes_a_whole_event(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(tmp_path)
    values = [Summary.Value(tag=tag, simple_value=v) for tag, v in (("a", 1.5), ("b", -2.0))]
    compat.tensorboard_file_writer(writer).add_summary(Summary(value=values), 7)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in ("a", "b")} == {
        "a": [(7, 1.5)],
        "b": [(7, -2.0)],
    }


def test_rewrite_csv_header_keeps_the_rows(tmp_path):
    from pytorch_lightning.loggers.csv_logs import ExperimentWriter

    writer = ExperimentWriter(str(tmp_path))
    writer.log_metrics({"a": 1.0}, step=0)
    writer.save()
    compat.rewrite_csv_header(writer, ["a", "b", "step"])
    with open(writer.metrics_file_path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows == [{"a": "1.0", "b": "", "step": "0"}], rows


class Counted(pl.LightningModule):
    """One weight; counts the validation passes that begin, and the steps each follows."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.validated: list[int] = []

    def training_step(self, batch, batch_idx):
        return (self.w * batch).sum()

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.validated.append(self.trainer.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SaveBeforeValidation(pl.Callback):
    """Saves a checkpoint at the end of step 2, and records whether Lightning validates then."""

    def __init__(self, path):
        self.path, self.due = path, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 2:
            self.due = compat.validation_due(trainer)
            trainer.save_checkpoint(self.path)


class RunOwedValidation(pl.Callback):
    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        compat.validate_on_restart(checkpoint)


def counted_fit(tmp_path, callbacks, ckpt_path=None) -> list[int]:
    module = Counted()
    trainer = pl.Trainer(
        max_steps=4,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    loader = torch.utils.data.DataLoader(torch.ones(8, 1), batch_size=1)
    trainer.fit(
        module, train_dataloaders=loader, val_dataloaders=loader, ckpt_path=ckpt_path, weights_only=False
    )
    return module.validated


def test_a_checkpoint_saved_before_its_steps_validation_runs_it_when_resumed(tmp_path):
    """Lightning skips, on resume, the validation due at the step a checkpoint was saved at the end of;
    validate_on_restart makes it run that validation first, as the run that was never stopped did."""
    saver = SaveBeforeValidation(tmp_path / "at2.ckpt")
    assert counted_fit(tmp_path, [saver]) == [2, 4] and saver.due is True
    assert counted_fit(tmp_path, [], ckpt_path=tmp_path / "at2.ckpt") == [4], (
        "Lightning's own resume skips it"
    )
    assert counted_fit(tmp_path, [RunOwedValidation()], ckpt_path=tmp_path / "at2.ckpt") == [2, 4]
    with pytest.raises(compat.LibraryChanged, match=re.escape(f"pytorch_lightning {pl.__version__}:")):
        compat.validate_on_restart({"loops": {}})


def test_hydra_args_parser_reads_a_sweep():
    args = compat.hydra_args_parser().parse_args(["-m", "n=1,2", "model=rnn"])
    assert args.multirun and args.overrides == ["n=1,2", "model=rnn"]


def test_a_changed_library_is_named_with_its_version():
    with pytest.raises(compat.LibraryChanged, match=re.escape(f"pytorch_lightning {pl.__version__}:")):
        compat.lightning_logs_now(object())
    with pytest.raises(compat.LibraryChanged, match=re.escape(f"torch {torch.__version__}:")):
        compat.tensorboard_file_writer(object())


def test_shutdown_workers_ends_a_persistent_loaders_processes():
    """A loader with persistent workers keeps its processes between passes; the preflight ends those it read."""
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=2, persistent_workers=True)
    list(loader)
    workers = list(loader._iterator._workers)
    assert all(w.is_alive() for w in workers)
    compat.shutdown_workers(loader)
    for worker in workers:
        worker.join(timeout=10)
    assert loader._iterator is None and not any(w.is_alive() for w in workers)
    compat.shutdown_workers(loader)  # a loader with no workers left: nothing to do


@pytest.mark.slow
def test_lightning_imports_without_what_torchmetrics_imports_only_because_it_is_there():
    """transformers and scipy, where installed, are not imported by `import pytorch_lightning` inside the guard,
    and import as usual after it (model=hf, an Optuna search)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from harness.compat import as_if_not_installed\n"
        "with as_if_not_installed(('transformers', 'scipy')):\n"
        "    import pytorch_lightning, torchmetrics\n"
        "print(sorted(m for m in ('transformers', 'scipy') if m in sys.modules))\n"
        "import importlib.util\n"
        "print([importlib.util.find_spec(m) is not None for m in ('transformers', 'scipy')])\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and lines[0] == "[]", result.stdout + result.stderr
    assert lines[1] == "[True, True]", f"found again after the guard (torchmetrics {torchmetrics_version()})"


def torchmetrics_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("torchmetrics")


def test_torch_function_off_hides_calls_from_a_mode():
    from torch.overrides import TorchFunctionMode

    seen = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.ones(3)
    with Watch():
        x.sum()
        with compat.torch_function_off():
            assert torch.relu(x).sum().item() == 3
        x.abs()
    assert seen == [torch.Tensor.sum, torch.Tensor.abs], seen


def test_a_dispatch_mode_sees_each_op_after_autocast_has_cast_it():
    """What the precision row reads: the dtype a matrix product really ran in, below autocast."""
    seen = []

    class Seen(compat.dispatch_mode()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(
                (func.overloadpacket.__name__, [a.dtype for a in args if isinstance(a, torch.Tensor)])
            )
            return func(*args, **(kwargs or {}))

    with torch.autocast("cpu", dtype=torch.bfloat16), Seen():
        torch.randn(2, 3) @ torch.randn(3, 4)
    assert ("mm", [torch.bfloat16, torch.bfloat16]) in seen, seen


def test_checkpoint_activations_recomputes_without_renaming_anything():
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    names = [n for n, _ in block.named_parameters()]
    calls = []
    block[1].register_forward_hook(lambda *args: calls.append(1))
    compat.checkpoint_activations(block)
    block(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert [n for n, _ in block.named_parameters()] == names
    assert len(calls) == 2, "the forward ran once: nothing was recomputed in the backward"
    assert all(p.grad is not None for p in block.parameters())
