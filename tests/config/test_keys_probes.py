"""The probes group's declarations (harness.config.groups.probes): each option composes to the values its yaml gave
before, the door refuses a bad argument of a built-in probe in one line naming the key without building the probes
(each mode's value of a per-mode one too), the probes built from code hold the same bounds, and no yaml repeats a
declaration's default."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from omegaconf import OmegaConf

from harness.config.declare import check_declared, declared_fields
from harness.config.groups import probes as declared
from harness.errors import ConfigError
from tests.config.keys import composed, refused_in_one_line
from tests.conftest import CONF, needs_probes, sampled, train

pytestmark = needs_probes


def _entry(target: str, **arguments) -> dict:
    return {"_target_": target, **arguments, "full": True}


LIMITS = {
    "window": 100,
    "patience": 3,
    "layer_ratio": 0.001,
    "reach": 0.0,
    "explode_jump": 100.0,
    "explode_growth": 100.0,
    "explode_norm": 1000.0,
    "dead_fraction": 0.9,
    "dead_units": 0.25,
    "saturated_fraction": 0.6,
    "saturated_late": 0.9,
    "spike_factor": 2.0,
    "spike_min": 0.1,
    "spike_sigmas": 6.0,
    "spike_stay": 8,
    "spikes": 2,
    "diverge_rise": 0.5,
    "diverge_stay": 20,
    "progress": 0.05,
    "ratio_high": 1.0,
    "ratio_low": 1e-06,
}
#: `train.py --cfg job probes=default` as conf/probes/default.yaml gave it before its keys were declared
DEFAULT = {
    "_target_": "harness.probes.from_config",
    "_recursive_": False,
    "enabled": True,
    "plots": True,
    "wandb_watch": False,
    "extra": {},
    "norms": _entry("harness.probes.layers.norms.ParameterNorms", every=1, weight_every=20, ratio_every=20),
    "dead": _entry("harness.probes.layers.dead.DeadGradients", every=1, patience=10, threshold=None),
    "histograms": _entry("harness.probes.layers.histograms.Histograms", every=100, bins=64),
    "logits": _entry("harness.probes.tokens.logits.LogitMass", every="log"),
    "datapoints": _entry(
        "harness.probes.tokens.datapoints.Datapoints",
        every=100,
        examples=4,
        prompts=3,
        tokens=32,
        generate_every=1000,
    ),
    "embeddings": _entry("harness.probes.tokens.embeddings.Embeddings", every=100),
    "grad_by_position": _entry("harness.probes.tokens.by_position.GradByPosition", every=100, examples=4),
    "reseed": _entry("harness.probes.tokens.reseed.ReseedProof", every=1),
    "activations": _entry(
        "harness.probes.layers.activations.Activations",
        every={"overfit": 20, "full": 50},
        include=["*"],
        exclude=[],
    ),
    "symptoms": _entry("harness.probes.detectors.Symptoms", every=10, fail=False, **LIMITS),
    "ranks": _entry("harness.probes.layers.agreement.RankAgreement", every=10),
    "watch": {
        "_target_": "harness.probes.wandb_watch.WandbWatch",
        "enabled": "${..wandb_watch}",
        "every": 10,
        "log": "all",
    },
}
OFF = {"_target_": "harness.probes.from_config", "_recursive_": False, "enabled": False}
#: overrides -> what they changed in probes=default's values, before the keys were declared
CHANGED = {
    "probes=off": OFF,
    "probes.activations.every=5": {**DEFAULT, "activations": {**DEFAULT["activations"], "every": 5}},
    "probes.activations.every.full=100": {
        **DEFAULT,
        "activations": {**DEFAULT["activations"], "every": {"overfit": 20, "full": 100}},
    },
    "+probes.extra.mine._target_=mypkg.Mine": {**DEFAULT, "extra": {"mine": {"_target_": "mypkg.Mine"}}},
    "mode=full": DEFAULT,
}

#: values a probe refuses when built: overrides, the key the door names, its words
REFUSED = [
    ("probes.grad_by_position.examples=0", "probes.grad_by_position.examples", "must be >= 1"),
    ("probes.histograms.every=0", "probes.histograms.every", "must be >= 1"),
    ("probes.histograms.bins=0", "probes.histograms.bins", "must be >= 1"),
    ("probes.norms.ratio_every=0", "probes.norms.ratio_every", "must be >= 1"),
    ("probes.norms.weight_every=0", "probes.norms.weight_every", "must be >= 1"),
    ("probes.dead.patience=0", "probes.dead.patience", "must be >= 1"),
    ("probes.dead.threshold=-1", "probes.dead.threshold", "must be >= 0"),
    ("probes.datapoints.examples=0", "probes.datapoints.examples", "must be >= 1"),
    ("probes.datapoints.prompts=-1", "probes.datapoints.prompts", "must be >= 0"),
    ("probes.datapoints.generate_every=0", "probes.datapoints.generate_every", "must be >= 1"),
    ("probes.logits.every=sometimes", "probes.logits.every", "give log"),
    ("probes.logits.every=0", "probes.logits.every", "give log"),
    ("probes.activations.every=0", "probes.activations.every", "must be >= 1"),
    ("probes.activations.every.full=0", "probes.activations.every.full", "must be >= 1"),
    ("probes.activations.every={overfit:0,full:5}", "probes.activations.every.overfit", "must be >= 1"),
    ("probes.symptoms.window=1", "probes.symptoms.window", "must be >= 2"),
    ("probes.symptoms.spike_stay=0", "probes.symptoms.spike_stay", "must be >= 1"),
    ("probes.symptoms.diverge_rise=0", "probes.symptoms.diverge_rise", "must be a number > 0"),
    ("probes.symptoms.layer_ratio=0", "probes.symptoms.layer_ratio", "must be a number > 0"),
    ("probes.symptoms.dead_units=2", "probes.symptoms.dead_units", "must be <= 1"),
    ("probes.symptoms.ratio_low=nan", "probes.symptoms.ratio_low", "not nan"),
    ("probes.watch.every=0", "probes.watch.every", "must be >= 1"),
    ("probes.watch.log=weights", "probes.watch.log", "choose one of gradients, parameters, all"),
]
#: the edges of the same ranges, which the probes take
TAKEN = [
    "probes.histograms.every=1 probes.histograms.bins=1 probes.dead.threshold=0 probes.datapoints.prompts=0",
    "probes.datapoints.tokens=0 probes.logits.every=1 probes.symptoms.window=2 probes.symptoms.dead_units=1",
    "probes.histograms.every=null probes.logits.every=null probes.norms.ratio_every=null",
    "probes.activations.every={overfit:1,full:1} probes.symptoms.diverge_rise=1e-9",
]


@pytest.mark.parametrize("overrides", ["", *CHANGED])
def test_each_option_composes_to_the_values_it_had(overrides):
    cfg = composed(*overrides.split())
    assert OmegaConf.to_container(cfg.probes) == CHANGED.get(overrides, DEFAULT)
    option = "off" if overrides == "probes=off" else "default"
    assert OmegaConf.get_type(cfg.probes) is declared.OPTIONS[option]  # typed by its declaration
    check_declared(cfg)  # its own values pass


@pytest.mark.parametrize(
    ("overrides", "name", "words"), sampled(REFUSED, every=5), ids=[o for o, _, _ in REFUSED]
)
def test_a_value_the_probe_refuses_is_refused_by_the_declaration(overrides, name, words):
    refused_in_one_line(overrides, name, words)


@pytest.mark.parametrize("overrides", sampled(TAKEN, every=5))
def test_the_edges_of_each_range_are_taken(overrides):
    check_declared(composed(*overrides.split()))


@pytest.mark.slow  # fresh interpreters: seconds
def test_a_refusal_at_the_command_line_is_one_line_and_exit_2(tmp_path, data_root):
    """The declaration's words, not the probe's (`(try 4)`): the door refused it before building any probe."""
    done = train("probes.grad_by_position.examples=0", cwd=tmp_path, data_root=data_root)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == (
        "error: probes.grad_by_position.examples=0: must be >= 1; training examples in the fixed batch "
        "(try probes.grad_by_position.examples=4)"
    ), lines[0]
    assert not (tmp_path / "run").exists()


def test_a_probe_built_from_code_holds_the_declared_bounds():
    """One declaration, two callers: a probe built in Python refuses what the door refuses, by the same doc."""
    from harness.probes.detectors.detector import Limits
    from harness.probes.tokens.by_position import GradByPosition
    from harness.probes.tokens.logits import LogitMass

    for build, name, words in (
        (lambda: GradByPosition(examples=0), "examples", "training examples in the fixed batch (try 4)"),
        (lambda: Limits(window=1), "window", ">= 2; steps the loss rules look back over"),
        (lambda: Limits(layer_ratio=0.0), "layer_ratio", "must be a number > 0"),
        (lambda: LogitMass(every="sometimes"), "every", "give log"),
    ):
        with pytest.raises(ConfigError) as err:
            build()
        assert err.value.key == name and words in str(err.value), err.value


def _constructor_defaults(target: str) -> dict:
    import importlib

    module, _, name = target.rpartition(".")
    found = inspect.signature(getattr(importlib.import_module(module), name)).parameters.values()
    return {p.name: p.default for p in found if p.default is not inspect.Parameter.empty}


def test_the_probes_own_defaults_are_the_declared_ones():
    """A probe built from code with no arguments runs as probes=default does (the per-mode and list defaults
    aside): its signature's second copy of each default has not drifted."""
    from harness.probes.detectors.detector import Limits

    drifted = []
    for entry in dataclasses.fields(declared.Probes):
        keys = entry.default_factory
        if not dataclasses.is_dataclass(keys):  # a setting, not an entry
            continue
        own = _constructor_defaults(keys._target_)
        if keys is declared.SymptomsKeys:
            own.update({f.name: f.default for f in dataclasses.fields(Limits)})
        for item in declared_fields(keys):
            if (
                item.name in own
                and own[item.name] != item.default
                and not isinstance(item.default, dict | list)
            ):
                drifted.append(
                    f"probes.{entry.name}.{item.name}: {own[item.name]!r} in code, {item.default!r} declared"
                )
    assert not drifted, drifted


def test_a_fork_s_entries_and_flags_still_compose():
    """A declared node still takes a probe beside the built-ins (`+probes.mine`), a builder flag with a `+`, and
    null for an entry left out."""
    cfg = composed(
        "+probes.mine={_target_: mypkg.Mine, every: 2}",
        "+probes.norms.enabled=false",
        "probes.histograms=null",
    )
    assert (cfg.probes.mine.every, cfg.probes.norms.enabled, cfg.probes.histograms) == (2, False, None)
    check_declared(cfg)


@pytest.mark.parametrize("option", list(declared.OPTIONS))
def test_no_yaml_repeats_its_declaration_s_default(option):
    text = (CONF / "probes" / f"{option}.yaml").read_text()
    own = OmegaConf.load(CONF / "probes" / f"{option}.yaml")
    assert own.defaults[0] == f"{option}_schema" and own.defaults[-1] == "_self_", list(own.defaults)
    schema = declared.OPTIONS[option]
    defaults = {item.name: item.default for item in declared_fields(schema)}
    repeated = [name for name in own if name != "defaults" and own[name] == defaults.get(name, object())]
    entries = {
        f.name: f.default_factory
        for f in dataclasses.fields(schema)
        if dataclasses.is_dataclass(f.default_factory)
    }
    for name, node in own.items():
        if name in entries and OmegaConf.is_dict(node):
            inner = {item.name: item.default for item in declared_fields(entries[name])}
            repeated += [f"{name}.{k}" for k in node if node[k] == inner.get(k, object())]
    assert not repeated, f"conf/probes/{option}.yaml repeats its declaration's default of {repeated}"
    assert "src/harness/config/groups/probes.py" in text and "python train.py" in text  # it still teaches
