"""The private APIs of other libraries the harness uses, each behind one function here and nowhere else. A library
that changed one raises LibraryChanged naming the library and version (tests/project/test_compat.py fails the same way)."""

# each buys something the public API does not give: a speed, a parser

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Callable


class LibraryChanged(RuntimeError):
    """A private API the harness relies on is gone or changed."""


def _private(library: str, version: str, what: str, get: Callable):
    try:
        return get()
    except (AttributeError, ImportError, TypeError, KeyError) as err:
        raise LibraryChanged(
            f"{library} {version}: {what} is not what harness.compat was written against "
            f"({type(err).__name__}: {err}); update src/harness/compat.py for this version"
        ) from err


def lightning_logs_now(trainer) -> bool:
    """Whether Lightning writes this step's logged values (every log_every_n_steps, and the last step)."""
    # a self.log call costs about as much whether or not it is written: the module logs only when it is
    import pytorch_lightning as pl

    return _private(
        "pytorch_lightning",
        pl.__version__,
        "Trainer._logger_connector.should_update_logs",
        lambda: bool(trainer._logger_connector.should_update_logs),
    )


def tensorboard_file_writer(writer):
    """The file writer behind torch's SummaryWriter, to write one event per step."""
    # one event holding a step's scalars costs a tenth of an event each: TensorBoard checksums every record in Python
    import torch

    return _private(
        "torch", torch.__version__, "SummaryWriter._get_file_writer()", lambda: writer._get_file_writer()
    )


def rewrite_csv_header(writer, keys: list[str]) -> None:
    """Rewrite metrics.csv under a wider header `keys`, rows kept (new columns empty)."""
    import pytorch_lightning as pl

    _private(
        "pytorch_lightning",
        pl.__version__,
        "ExperimentWriter._rewrite_with_new_header(keys)",
        lambda: writer._rewrite_with_new_header(keys),
    )


def validation_due(trainer) -> bool:
    """Whether Lightning validates at the end of the training step now ending (called from on_train_batch_end)."""
    import pytorch_lightning as pl

    return _private(
        "pytorch_lightning",
        pl.__version__,
        "fit_loop.epoch_loop._should_check_val_fx(fit_loop._data_fetcher)",
        lambda: bool(
            sum(trainer.num_val_batches)
            and trainer.fit_loop.epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher)
        ),
    )


def validate_on_restart(checkpoint: dict) -> None:
    """Edit a checkpoint saved before its step's due validation so that resuming runs that validation first."""
    # Lightning's own path for a checkpoint saved during a validation: the step's end marked done, the validation's
    # progress as one batch started, none finished
    import pytorch_lightning as pl

    def edit() -> None:
        loop = checkpoint["loops"]["fit_loop"]
        steps = loop["epoch_loop.batch_progress"]
        for part in ("total", "current"):
            steps[part]["completed"] = steps[part]["processed"]
        val = loop["epoch_loop.val_loop.batch_progress"]
        before = val["total"]["completed"] - val["current"]["completed"]
        val["total"] = {"ready": before + 1, "started": before + 1, "processed": before, "completed": before}
        val["current"] = {"ready": 1, "started": 1, "processed": 0, "completed": 0}
        val["is_last_batch"] = False

    _private("pytorch_lightning", pl.__version__, "a checkpoint's loops.fit_loop progress", edit)


def hydra_args_parser():
    """Hydra's own command-line parser, so the door reads the overrides exactly as Hydra will."""
    import hydra

    def parser():
        from hydra._internal.utils import get_args_parser

        return get_args_parser()

    return _private("hydra-core", hydra.__version__, "hydra._internal.utils.get_args_parser", parser)


def shutdown_workers(loader) -> None:
    """End the worker processes a DataLoader keeps for its next pass (persistent_workers=True)."""
    # a loader the preflight is done with would otherwise keep its workers through training
    import torch

    iterator = getattr(loader, "_iterator", None)
    if iterator is None:
        return
    _private(
        "torch",
        torch.__version__,
        "_MultiProcessingDataLoaderIter._shutdown_workers()",
        iterator._shutdown_workers,
    )
    loader._iterator = None


def stand_down_child_observer() -> list:
    """The processes Lightning's launcher started for this machine's other ranks, its observer thread stood down
    (harness.train.distributed.watchdog watches them instead)."""
    # within 5 s of a rank's death the observer SIGKILLs this process too, before the run's verdict is written
    import threading

    import lightning_fabric

    def stand_down():
        procs = []
        for thread in threading.enumerate():
            if type(thread).__name__ == "_ChildProcessObserver":
                procs += thread._child_processes
                thread._child_processes = []  # its next look finds no process to watch, and it ends
        return procs

    return _private(
        "lightning_fabric",
        lightning_fabric.__version__,
        "_ChildProcessObserver._child_processes",
        stand_down,
    )


class _NotInstalled(importlib.metadata.DistributionFinder):
    """An importlib.metadata distribution finder that reports `names` as not installed."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, *args, **kwargs):
        return None  # finds no module: the other finders do

    def find_distributions(self, context=None):
        name = getattr(context, "name", None)
        if name is not None and name.replace("-", "_").lower() in self.names:
            raise importlib.metadata.PackageNotFoundError(name)
        return iter(())


@contextlib.contextmanager
def as_if_not_installed(names: tuple[str, ...]):
    """Inside, `names` look not installed (metadata not found, import blocked); after it, all is as it was."""
    # Lightning imports torchmetrics, which imports transformers and scipy wherever they are installed: a second of
    # every start-up, with no setting to turn it off (torchmetrics 1.9: RequirementCache reads importlib.metadata)
    names = tuple(n for n in names if n not in sys.modules)
    finder = _NotInstalled(names)
    sys.meta_path.insert(0, finder)
    for name in names:
        sys.modules[name] = None
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in names:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]


#: packages Lightning's torchmetrics imports whenever they are installed, which no run of the harness needs at
#: start-up: model=hf imports transformers when it builds the model, an Optuna search scipy when it samples
UNASKED = ("transformers", "scipy")


def import_lightning():
    """pytorch_lightning, imported without UNASKED; a signal during the import is raised once it is done."""
    from harness.signals import Held

    with Held(), as_if_not_installed(UNASKED):
        import pytorch_lightning
    return pytorch_lightning


def torch_function_off():
    """A context in which no __torch_function__ runs, neither a mode's nor a subclass's."""
    # a probe's statistics, computed in a hook while a TorchFunctionMode watches, then cost a plain call each
    import torch

    return _private(
        "torch", torch.__version__, "torch._C.DisableTorchFunction()", lambda: torch._C.DisableTorchFunction()
    )


def checkpoint_activations(module) -> None:
    """Recompute `module`'s activations in the backward, with no wrapper (its parameters keep their names)."""
    # PyTorch's composable checkpoint, which has no public path yet
    import torch

    checkpoint = _private(
        "torch",
        torch.__version__,
        "torch.distributed._composable.checkpoint",
        lambda: importlib.import_module("torch.distributed._composable").checkpoint,
    )
    checkpoint(module)


def dispatch_mode():
    """torch's TorchDispatchMode: sees every aten op as it runs, after autocast has cast its inputs."""
    import torch

    return _private(
        "torch",
        torch.__version__,
        "torch.utils._python_dispatch.TorchDispatchMode",
        lambda: importlib.import_module("torch.utils._python_dispatch").TorchDispatchMode,
    )
