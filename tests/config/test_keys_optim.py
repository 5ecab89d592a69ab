"""The optim, schedule and loss groups' declarations (harness.config.groups.optim): each option composes to the
values its yaml gave before, the door refuses what torch or the loss would refuse when built (one line naming the key,
exit 2), and no yaml repeats a declaration's default."""

from __future__ import annotations

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from harness.config.declare import check_declared, declared_fields
from harness.config.groups import optim as declared
from harness.errors import ConfigError
from harness.train.optim import schedule
from tests.config.keys import composed
from tests.conftest import CONF, sampled, train

ADAMW = {
    "_target_": "torch.optim.AdamW",
    "_partial_": True,
    "lr": 3e-3,
    "weight_decay": 0.0,
    "betas": [0.9, 0.99],
}
SGD = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1, "momentum": 0.9, "nesterov": False}
SCHEDULE = {"_target_": "harness.train.optim.schedule", "_partial_": True, "min_lr": None}
#: `train.py --cfg job <group>=<option>` as the yaml files gave them before their keys were declared
BEFORE = {
    ("optim", "adamw"): {**ADAMW, "foreach": None, "fused": True},
    ("optim", "sgd"): {**SGD, "weight_decay": 0.0, "fused": True},
    ("schedule", "constant"): {**SCHEDULE, "shape": "constant", "warmup_steps": 0},
    ("schedule", "cosine"): {**SCHEDULE, "shape": "cosine", "warmup_steps": 100},
    ("schedule", "linear"): {**SCHEDULE, "shape": "linear", "warmup_steps": 100},
    ("loss", "cross_entropy"): {"_target_": "harness.ops.loss.CrossEntropy"},
    ("loss", "label_smoothing"): {"_target_": "harness.ops.loss.LabelSmoothing", "smoothing": 0.1},
    ("loss", "z_loss"): {"_target_": "harness.ops.loss.ZLoss", "weight": 1e-4},
}
OPTIONS = {
    "optim": declared.OPTIONS_OPTIM,
    "schedule": declared.OPTIONS_SCHEDULE,
    "loss": declared.OPTIONS_LOSS,
}

#: values torch (or the loss) refuses when it builds: overrides, the key the door names, the start of its words
REFUSED = [
    ("optim.lr=nan", "optim.lr", "must be a number, not nan"),
    ("optim.lr=-1", "optim.lr", "must be >= 0"),
    ("optim.weight_decay=-0.1", "optim.weight_decay", "must be >= 0"),
    ("optim.betas=[2,0.9]", "optim.betas", "torch.optim.AdamW refuses it"),
    ("optim.betas=[0.9,1.0]", "optim.betas", "torch.optim.AdamW refuses it"),
    ("optim.betas=[-0.1,0.9]", "optim.betas", "torch.optim.AdamW refuses it"),
    ("+optim.eps=-1e-8", "optim.eps", "torch.optim.AdamW refuses it"),
    ("optim.foreach=true", "optim.foreach", "torch.optim.AdamW refuses it"),
    ("optim=sgd optim.momentum=-0.5", "optim.momentum", "must be >= 0"),
    (
        "optim=sgd optim.nesterov=true optim.momentum=0",
        "optim.nesterov",
        "torch.optim.SGD refuses it (Nesterov",
    ),
    ("optim=sgd optim.nesterov=true +optim.dampening=0.1", "optim.nesterov", "torch.optim.SGD refuses it"),
    ("loss=label_smoothing loss.smoothing=1", "loss.smoothing", "must be < 1"),
    ("loss=label_smoothing loss.smoothing=-0.1", "loss.smoothing", "must be >= 0"),
    ("loss=z_loss loss.weight=-1", "loss.weight", "must be >= 0"),
]
#: the edges of the same ranges, which torch and the losses take
TAKEN = [
    "optim.lr=0",
    "optim.betas=[0.0,0.999]",
    "+optim.eps=0",
    "optim.foreach=true optim.fused=false",
    "optim=sgd optim.momentum=0",
    "optim=sgd optim.nesterov=true",
    "loss=label_smoothing loss.smoothing=0",
    "loss=label_smoothing loss.smoothing=0.999",
    "loss=z_loss loss.weight=0",
]


def built(cfg, group: str):
    """What the run builds of `group` from `cfg`: the optimizer over one weight, or the loss."""
    if group == "optim":
        return instantiate(cfg.optim)([torch.nn.Parameter(torch.ones(2, 2))])
    return instantiate(cfg.loss)


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_each_option_composes_to_the_values_it_had(group, option):
    cfg = composed(f"{group}={option}")
    assert OmegaConf.to_container(cfg[group]) == BEFORE[group, option]
    assert OmegaConf.get_type(cfg[group]) is OPTIONS[group][option]  # typed by its declaration
    check_declared(cfg)  # its own values pass


def test_mode_full_and_an_experiment_keep_their_schedule_and_optimizer():
    cfg = composed("mode=full")
    assert OmegaConf.to_container(cfg.schedule) == BEFORE["schedule", "cosine"]
    cfg = composed("experiment=lm")
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.schedule.shape, cfg.schedule.warmup_steps) == (
        1e-3,
        0.1,
        "cosine",
        30,
    )


@pytest.mark.parametrize(
    ("overrides", "name", "words"), sampled(REFUSED, every=5), ids=[o for o, _, _ in REFUSED]
)
def test_a_value_the_library_refuses_is_refused_by_the_declaration(overrides, name, words):
    """The door names the key; the library itself refuses the same value, so the declaration is its rule."""
    cfg = composed(*overrides.split())
    with pytest.raises(ConfigError) as err:
        check_declared(cfg)
    assert str(err.value).startswith(f"{name}=") and words in str(err.value), err.value
    assert "\n" not in str(err.value)
    with pytest.raises((ValueError, RuntimeError, InstantiationException)):  # the loss's, wrapped by Hydra
        built(cfg, overrides.split()[0].split("=")[0].lstrip("+").split(".")[0])


@pytest.mark.parametrize("overrides", sampled(TAKEN, every=5))
def test_the_edges_of_each_range_are_taken_by_the_declaration_and_the_library(overrides):
    cfg = composed(*overrides.split())
    check_declared(cfg)
    built(cfg, overrides.split()[0].lstrip("+").split(".")[0].split("=")[0])


@pytest.mark.slow  # fresh interpreters: seconds
def test_a_refusal_at_the_command_line_is_one_line_and_exit_2(tmp_path, data_root):
    for overrides, name, words in (REFUSED[0], REFUSED[3], REFUSED[9], REFUSED[11]):
        done = train(*overrides.split(), cwd=tmp_path, data_root=data_root)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"error: {name}=") and words in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "kwargs"),
    [
        ("schedule.shape=step", {"shape": "step"}),
        ("schedule.warmup_steps=-1", {"warmup_steps": -1}),
        ("schedule=cosine schedule.min_lr=1.0", {"min_lr": 1.0}),
        ("schedule=cosine schedule.min_lr=-1e-4", {"min_lr": -1e-4}),
    ],
)
def test_a_schedule_built_from_code_is_refused_in_the_door_s_words(overrides, kwargs):
    """One rule, two callers: harness.train.optim.schedule holds its arguments to the same declaration."""
    with pytest.raises(ConfigError) as door:
        check_declared(composed(*overrides.split()))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=3e-3)
    with pytest.raises(ConfigError) as code:
        schedule(optimizer, total_steps=10, **kwargs)
    assert str(code.value) == str(door.value)


def test_a_schedule_at_its_peak_and_undeclared_optimizer_keys_are_taken():
    check_declared(composed("schedule=cosine", "schedule.min_lr=0.003"))  # min_lr may reach optim.lr
    assert composed("+optim.momentum=0.9").optim.momentum == 0.9  # torch's others still take a +
    assert composed("loss._target_=examples.loss.FocalLoss", "+loss.gamma=2").loss.gamma == 2


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_no_yaml_repeats_its_declaration_s_default(group, option):
    text = (CONF / group / f"{option}.yaml").read_text()
    own = OmegaConf.load(CONF / group / f"{option}.yaml")
    assert list(own.defaults) == [f"{option}_schema", "_self_"]
    defaults = {item.name: item.default for item in declared_fields(OPTIONS[group][option])}
    repeated = [name for name in own if name != "defaults" and own[name] == defaults.get(name, object())]
    assert not repeated, f"conf/{group}/{option}.yaml repeats its declaration's default of {repeated}"
    assert "src/harness/config/groups/optim.py" in text and "python train.py" in text  # it still teaches
