"""One way to be a probe: the Probe base class, the ProbeSet that runs every probe as one callback, and the
builder that makes a probe of every `_target_` entry under `probes`, a fork's own as much as the built-ins."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from harness.config import build
from harness.errors import ConfigError
from harness.probes import Probe, ProbeSet
from harness.tasks.training import run
from harness.train.module import HarnessModule
from tests.forks.models import UnusedParamRNN
from tests.probes.conftest import NormRecorder, _batches, _by_step, _fit, _rows

STEPS, LENGTH = 12, 16
TINY = ["preflight=false", f"mode.max_steps={STEPS}", f"data.length={LENGTH}", "model.d_model=16", "n=2"]


class CountingProbe(Probe):
    """A fork's probe: `count/steps`, how many of its steps it has seen, every `every` steps."""

    def __init__(self, every: int | None = 1):
        super().__init__(every)
        self.count = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.due(trainer.global_step):
            self.count += 1
            self.sink.add(trainer.global_step, {"count/steps": float(self.count)})

    def verdict_items(self) -> dict:
        return {"counted": self.count}


class StatefulProbe(Probe):
    """A probe with checkpoint state of its own: a ProbeSet cannot carry it."""

    def state_dict(self) -> dict:
        return {"seen": 1}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


def _recording(hook: str):
    def record(self, *args, **kwargs) -> None:
        self.called.append(hook)

    return record


def _hook_logger(base: type) -> type:
    """A subclass of `base` defining every callback hook of this Lightning version, each recording its name
    in `called`, in order."""
    from harness.probes.probeset import hooks

    def __init__(self) -> None:
        base.__init__(self)
        self.called = []

    methods = {hook: _recording(hook) for hook in hooks()}
    return type(f"Every{base.__name__}Hook", (base,), {"__init__": __init__, **methods})


def test_probe_set_calls_every_hook_a_probe_defines_as_lightning_calls_a_callback(tmp_path):
    """A probe inside the ProbeSet sees the same hooks, in the same order, as the same probe run as a Lightning
    callback of its own: setup, fit, epoch, batch, validation, checkpoint and teardown hooks alike."""
    inside, alone = _hook_logger(Probe)(), _hook_logger(pl.Callback)()
    torch.manual_seed(0)
    module = HarnessModule(UnusedParamRNN(vocab_size=8, d_model=8))
    callbacks = [ProbeSet([inside]), alone]
    validating = {"val_check_interval": 2, "num_sanity_val_steps": 1, "limit_val_batches": 1}
    trainer = _fit(module, callbacks, _batches(8, 3), logger=False, **validating)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    assert {"on_validation_batch_end", "on_train_epoch_end", "on_save_checkpoint", "teardown"} <= set(
        alone.called
    )
    assert inside.called == alone.called


def test_probe_set_refuses_a_method_it_cannot_call_naming_probe_and_hook(make_config, tmp_path):
    """A callback's own checkpoint state (state_dict) cannot be dispatched for one probe among several: refused
    by name, in Python and from the config, never silently left uncalled."""
    with pytest.raises(
        TypeError, match=r"StatefulProbe overrides state_dict, load_state_dict.*plain pl\.Callback"
    ):
        ProbeSet([StatefulProbe()])
    cfg = make_config(f"+probes.stateful={{_target_: {__name__}.StatefulProbe}}")
    with pytest.raises(ConfigError, match=r"probes\.stateful=.*StatefulProbe: overrides state_dict"):
        build(cfg.probes, "probes", run_dir=tmp_path, data=None, overfit=True)


def test_a_forks_probe_is_an_entry_like_the_built_ins(make_config, tmp_path):
    """A Probe of a fork's own, named by _target_ beside the built-ins or under `extra`, runs inside the one
    ProbeSet, bound to its sink and the run; a plain Callback runs on its own; `full: false` leaves a probe
    out of mode=full, and an entry set to null leaves it out."""
    target = f"{__name__}.CountingProbe"
    overrides = [
        f"+probes.mine={{_target_: {target}, every: 2}}",
        f"+probes.extra.theirs={{_target_: {target}, every: 3, full: false}}",
        f"+probes.extra.plain={{_target_: {__name__}.NormRecorder}}",
        "probes.histograms=null",
    ]
    cfg = make_config(*overrides)
    built = build(cfg.probes, "probes", run_dir=tmp_path, data=None, overfit=True)
    (probes, plain) = built
    assert isinstance(probes, ProbeSet) and isinstance(plain, NormRecorder)
    kinds = [type(p).__name__ for p in probes.probes]
    assert kinds == [
        "ParameterNorms",
        "DeadGradients",
        "LogitMass",
        "Datapoints",
        "Embeddings",
        "GradByPosition",
        "ReseedProof",
        "Activations",
        "Symptoms",
        "RankAgreement",
        "CountingProbe",
        "CountingProbe",
        "MetricSink",
    ]
    mine, theirs = probes.probes[10:12]
    assert (mine.every, theirs.every) == (2, 3)
    assert mine.sink is probes.sink and mine.run.run_dir == tmp_path and mine.run.overfit
    full = make_config(*overrides, "mode=full", run_dir=tmp_path / "full")
    kinds = [
        type(p).__name__
        for p in build(full.probes, "probes", run_dir=tmp_path, data=None, overfit=False)[0].probes
    ]
    assert kinds.count("CountingProbe") == 1 and "Histograms" not in kinds


def test_a_forks_probe_logs_through_the_sink_in_a_real_run(make_config, tmp_path):
    """The config route end to end: the probe's scalars in metrics.csv on its steps only, its verdict item in
    verdict.json."""
    entry = f"+probes.count={{_target_: {__name__}.CountingProbe, every: 2}}"
    verdict = run(make_config("n=1", "preflight=false", "probes.plots=false", "mode.max_steps=5", entry))
    logged = _by_step(_rows(tmp_path / "run"), "count/steps")
    assert logged == {0: 1.0, 2: 2.0, 4: 3.0} and verdict["counted"] == 3, (logged, verdict.get("counted"))


def test_an_argument_given_per_mode_takes_the_runs_mode_and_a_plain_value_serves_both(make_config, tmp_path):
    def activations_every(cfg, overfit: bool) -> int:
        (probes,) = build(cfg.probes, "probes", run_dir=tmp_path, data=None, overfit=overfit)
        (activations,) = [p for p in probes.probes if type(p).__name__ == "Activations"]
        return activations.every

    default, plain = make_config(), make_config("probes.activations.every=5")
    one_mode = make_config("probes.activations.every.full=100")
    assert [activations_every(default, True), activations_every(default, False)] == [20, 50]
    assert [activations_every(plain, True), activations_every(plain, False)] == [5, 5]
    assert [activations_every(one_mode, True), activations_every(one_mode, False)] == [20, 100]


@pytest.mark.parametrize(
    "override, key",
    [
        ("probes.histograms.every=0", r"probes\.histograms\.every=0"),
        ("probes.dead.threshold=-1", r"probes\.dead\.threshold=-1"),
        ("probes.norms.ratio_every=0", r"probes\.norms\.ratio_every=0"),
        ("+probes.extra.bad=3", r"probes\.extra\.bad=3"),
    ],
)
def test_a_bad_probe_entry_is_a_config_error_naming_its_key(make_config, tmp_path, override, key):
    with pytest.raises(ConfigError, match=key):
        build(make_config(override).probes, "probes", run_dir=tmp_path, data=None, overfit=True)
