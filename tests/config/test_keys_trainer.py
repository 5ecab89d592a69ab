"""The trainer, logger, callbacks, debug, perf and paths groups' declarations (harness.config.groups.trainer): each
option composes to the values its yaml gave before, a bad value of a declared key is refused at the door in one line
naming it, Lightning's other Trainer arguments still take a +, the choices match Lightning's, and no yaml repeats a
declaration's default."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from harness.config.declare import check_declared, declared_fields
from harness.config.groups import trainer as declared
from harness.errors import ConfigError
from tests.config.keys import composed, refused_in_one_line
from tests.conftest import CONF, sampled, train

CPU = {"accelerator": "cpu", "devices": 1, "precision": "32-true", "gradient_clip_val": 1.0}
DDP = {"accelerator": "auto", "devices": 2, "precision": "32-true", "gradient_clip_val": 1.0, "num_nodes": 1}
FSDP = {
    "_target_": "harness.train.distributed.sharding.FSDP",
    "mixed_precision": None,
    "activation_checkpointing": False,
    "reshard_after_forward": True,
    "save_distributed_checkpoint": False,
    "meta_init": False,
}
WANDB = {
    "mode": "offline",
    "project": "harness",
    "entity": None,
    "run_name": None,
    "group": None,
    "id": None,
    "tags": [],
}
SUMMARY = {"max_depth": 2, "enabled": "${oc.select:trainer.enable_model_summary,true}"}
BAR = {"refresh_rate": 1, "enabled": "${oc.select:mode.progress_bar,false}"}
CALLBACKS = {
    "model_summary": {"_target_": "pytorch_lightning.callbacks.ModelSummary", **SUMMARY},
    "progress_bar": {"_target_": "pytorch_lightning.callbacks.TQDMProgressBar", **BAR},
}
EARLY = {
    "_target_": "pytorch_lightning.callbacks.EarlyStopping",
    "monitor": "val/loss",
    "mode": "min",
    "patience": 3,
}
WATCHES = {
    "host_sync": {"enabled": True, "steps": [3, 7], "sites": 5, "min_per_step": 2},
    "recompiles": {"enabled": True, "allowed": 2},
    "straggler": {"enabled": True, "every": 10, "patience": 3, "min_ms": 10, "fraction": 0.2},
}
PERF = {
    "_target_": "harness.train.perf.speed.Speed",
    "enabled": True,
    "flops": True,
    "peak_flops": None,
    "peak_cache": "${paths.data_dir}/perf_peaks.json",
    "warmup": 5,
    "data_wait": 0.3,
    "window": 50,
    "symptoms": WATCHES,
}
PATHS = {
    "data_dir": "${oc.env:HARNESS_DATA_DIR,data}",
    "log_dir": "${oc.env:HARNESS_LOG_DIR,outputs}",
    "output_dir": "${hydra:runtime.output_dir}",
}
PROFILER = {"_target_": "harness.train.profiling.SimpleProfiler", "dirpath": "${paths.output_dir}"}
#: `train.py --cfg job <group>=<option>`: the node (the debug presets: debug, what they add to trainer) as the yaml
#: files gave it before its keys were declared
BEFORE = {
    ("trainer", "cpu"): CPU,
    ("trainer", "gpu"): {**CPU, "accelerator": "gpu", "precision": "bf16-mixed"},
    ("trainer", "ddp"): {**DDP, "strategy": "ddp"},
    ("trainer", "fsdp"): {**DDP, "strategy": FSDP},
    ("logger", "csv"): {"csv": {}},
    ("logger", "tensorboard"): {"tensorboard": {"name": "tensorboard"}},
    ("logger", "wandb"): {"wandb": WANDB},
    ("logger", "mlflow"): {"mlflow": {"experiment": "harness", "run_name": None, "tracking_uri": None}},
    ("callbacks", "default"): CALLBACKS,
    ("callbacks", "early_stopping"): {
        **CALLBACKS,
        "early_stopping": {**EARLY, "min_delta": 0.0, "verbose": False},
    },
    ("callbacks", "rich"): {
        "model_summary": {"_target_": "pytorch_lightning.callbacks.RichModelSummary", **SUMMARY},
        "progress_bar": {"_target_": "pytorch_lightning.callbacks.RichProgressBar", **BAR},
    },
    ("debug", "anomaly"): ({"name": "anomaly", "judge": True}, {"detect_anomaly": True}),
    ("debug", "fdr"): ({"name": "fdr", "judge": False}, {"fast_dev_run": True}),
    ("debug", "limit"): ({"name": "limit", "judge": False}, {"limit_val_batches": 2}),
    ("debug", "profiler"): (
        {"name": "profiler", "judge": True},
        {"profiler": {**PROFILER, "filename": "profiler", "extended": True}},
    ),
    ("perf", "default"): PERF,
    ("paths", "default"): PATHS,
}
OPTIONS = {group: getattr(declared, f"OPTIONS_{group.upper()}") for group, _ in BEFORE}

#: a bad value of a declared key: overrides, the key the door names, the start of its words
REFUSED = [
    ("trainer.precision=13", "trainer.precision", "choose one of 64, 32, 16"),
    ("trainer.accelerator=tqu", "trainer.accelerator", "choose one of auto, cpu"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val", "must be >= 0"),
    ("trainer.gradient_clip_val=nan", "trainer.gradient_clip_val", "must be a number, not nan"),
    ("trainer=ddp trainer.num_nodes=0", "trainer.num_nodes", "must be >= 1"),
    ("trainer=fsdp trainer.num_nodes=-1", "trainer.num_nodes", "must be >= 1"),
    (
        "trainer=fsdp trainer.strategy.mixed_precision=fp8",
        "trainer.strategy.mixed_precision",
        "choose one of bf16",
    ),
    ("+trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches", "must be a whole number >= 1"),
    (
        "trainer=fsdp trainer.strategy.meta_init=true model=rnn",
        "trainer.strategy.meta_init",
        "RNN has no init_",
    ),
    (
        "logger=[tensorboard,wandb] logger.wandb.mode=dryrun",
        "logger.wandb.mode",
        "choose one of offline, online",
    ),
    ("callbacks.model_summary.max_depth=-2", "callbacks.model_summary.max_depth", "must be >= -1"),
    ("callbacks.progress_bar.refresh_rate=-1", "callbacks.progress_bar.refresh_rate", "must be >= 0"),
    (
        "callbacks=early_stopping callbacks.early_stopping.mode=up",
        "callbacks.early_stopping.mode",
        "choose one of",
    ),
    (
        "callbacks=early_stopping callbacks.early_stopping.patience=-1",
        "callbacks.early_stopping.patience",
        "must be",
    ),
    ("perf.peak_flops=0", "perf.peak_flops", "must be above 0"),
    ("perf.peak_flops=-1e12", "perf.peak_flops", "must be >= 0"),
    ("perf.warmup=-1", "perf.warmup", "must be >= 0"),
    ("perf.data_wait=0", "perf.data_wait", "must be above 0"),
    ("perf.data_wait=1.5", "perf.data_wait", "must be <= 1"),
    ("perf.window=0", "perf.window", "must be >= 1"),
    ("perf.symptoms.host_sync.steps=[3,-1]", "perf.symptoms.host_sync.steps", "give steps >= 0"),
    ("perf.symptoms.host_sync.sites=0", "perf.symptoms.host_sync.sites", "must be >= 1"),
    ("perf.symptoms.host_sync.min_per_step=0.5", "perf.symptoms.host_sync.min_per_step", "must be >= 1"),
    ("perf.symptoms.recompiles.allowed=-1", "perf.symptoms.recompiles.allowed", "must be >= 0"),
    ("perf.symptoms.straggler.every=0", "perf.symptoms.straggler.every", "must be >= 1"),
    ("perf.symptoms.straggler.min_ms=-1", "perf.symptoms.straggler.min_ms", "must be >= 0"),
    ("perf.symptoms.straggler.fraction=1", "perf.symptoms.straggler.fraction", "must be < 1"),
]
#: the edges of the same ranges, taken
TAKEN = [
    "trainer.precision=16 trainer.gradient_clip_val=0",
    "trainer.precision=bf16 trainer.gradient_clip_val=null trainer.accelerator=auto",
    "trainer=fsdp trainer.strategy.mixed_precision=bf16 +trainer.accumulate_grad_batches=1",
    "trainer=fsdp trainer.strategy.meta_init=true model=gpt",
    "callbacks.model_summary.max_depth=-1 callbacks.progress_bar.refresh_rate=0",
    "callbacks=early_stopping callbacks.early_stopping.mode=max callbacks.early_stopping.patience=0",
    "perf.peak_flops=1 perf.warmup=0 perf.data_wait=1 perf.window=1",
    "perf.symptoms.host_sync.steps=[0] perf.symptoms.host_sync.min_per_step=1 perf.symptoms.recompiles.allowed=0",
    "perf.symptoms.straggler.fraction=0 perf.symptoms.straggler.min_ms=0",
    "perf.symptoms.host_sync=null",
]


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_each_option_composes_to_the_values_it_had(group, option):
    cfg = composed(f"{group}={option}")
    node = cfg[group]
    if group == "debug":  # a preset: its own node, and the Lightning arguments it adds to the trainer's
        expected, added = BEFORE[group, option]
        assert OmegaConf.to_container(cfg.trainer) == {**CPU, **added}
    elif group == "logger":
        node = cfg.logger[option]
        expected = BEFORE[group, option][option]
    else:
        expected = BEFORE[group, option]
    assert OmegaConf.to_container(node) == expected
    assert OmegaConf.get_type(node) is OPTIONS[group][option]  # typed by its declaration
    check_declared(cfg)  # its own values pass


def test_several_trackers_compose_each_under_its_own_key_typed_by_its_declaration():
    for trackers in ("[tensorboard,wandb]", "[csv,tensorboard,wandb,mlflow]"):
        cfg = composed(f"logger={trackers}")
        names = trackers.strip("[]").split(",")
        assert list(cfg.logger) == names
        for name in names:
            assert OmegaConf.to_container(cfg.logger[name]) == BEFORE["logger", name][name]
            assert OmegaConf.get_type(cfg.logger[name]) is declared.OPTIONS_LOGGER[name]
    with pytest.raises(ConfigError, match=r"^logger.wandb.mode=on: choose one of offline, online, disabled"):
        check_declared(composed("logger=[tensorboard,wandb]", "logger.wandb.mode=on"))


@pytest.mark.parametrize(
    ("overrides", "name", "words"), sampled(REFUSED, every=5), ids=[o for o, _, _ in REFUSED]
)
def test_a_bad_value_of_a_declared_key_is_refused_in_one_line_naming_it(overrides, name, words):
    refused_in_one_line(overrides, name, words)


@pytest.mark.parametrize("overrides", sampled(TAKEN, every=5))
def test_the_edges_of_each_range_are_taken(overrides):
    check_declared(composed(*overrides.split()))


def test_a_tpu_is_refused_where_torch_xla_is_missing(monkeypatch):
    monkeypatch.setattr(declared.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"^trainer.accelerator=tpu: it needs the torch_xla package"):
        check_declared(composed("trainer.accelerator=tpu"))
    monkeypatch.setattr(declared.importlib.util, "find_spec", lambda name: object())
    check_declared(composed("trainer.accelerator=tpu"))


@pytest.mark.slow  # builds Trainers: ~2 s
def test_lightning_s_other_arguments_stay_undeclared_and_take_a_plus():
    """+trainer.NAME adds any Lightning argument (Hydra refuses + for a declared key); a preset sets one as a plain
    key; a misspelled key is still refused, a declared one's type still held."""
    cfg = composed(
        "+trainer.accumulate_grad_batches=2",
        "+trainer.profiler._target_=pytorch_lightning.profilers.PassThroughProfiler",
    )
    assert cfg.trainer.accumulate_grad_batches == 2 and cfg.trainer.profiler._target_.endswith(
        "PassThroughProfiler"
    )
    assert composed("debug=fdr", "+trainer.limit_val_batches=1").trainer.limit_val_batches == 1
    assert composed("trainer=ddp", "+trainer.strategy._target_=x.Strategy").trainer.strategy == {
        "_target_": "x.Strategy"
    }
    assert composed("trainer=fsdp", "trainer.strategy=ddp").trainer.strategy == "ddp"
    cfg = composed(
        "+callbacks.swa._target_=pytorch_lightning.callbacks.StochasticWeightAveraging",
        "callbacks.progress_bar=null",
    )
    assert (
        list(cfg.callbacks) == ["model_summary", "progress_bar", "swa"] and cfg.callbacks.progress_bar is None
    )
    for typo in (
        "trainer.limt_val_batches=2",
        "callbacks.model_sumary.max_depth=1",
        "perf.symptoms.host_sync.stepz=[1]",
    ):
        with pytest.raises(ConfigCompositionException):
            composed(typo)
    with pytest.raises(ConfigCompositionException):
        composed("trainer.num_nodes=2")  # trainer=cpu has no num_nodes: +trainer.num_nodes=2 adds it
    with pytest.raises(ConfigCompositionException):
        composed("trainer.gradient_clip_val=abc")
    lightning = {"accelerator", "devices", "precision", "gradient_clip_val", "num_nodes", "strategy"}
    for schema in set(declared.OPTIONS_TRAINER.values()):
        assert {item.name for item in declared_fields(schema)} <= lightning, schema


def test_the_choices_are_lightning_s_own():
    """Written down without Lightning (the door imports none), held equal to Lightning's here, so they cannot drift."""
    from lightning_fabric.connector import _PRECISION_INPUT
    from lightning_fabric.utilities.exceptions import MisconfigurationException
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.callbacks import GradientAccumulationScheduler

    from harness.train.distributed.sharding import PRECISIONS

    lightning = [value for literal in typing.get_args(_PRECISION_INPUT) for value in typing.get_args(literal)]
    assert list(declared.PRECISIONS) == lightning
    assert set(declared.ACCELERATORS) == {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}
    assert tuple(PRECISIONS) == declared.SHARD_PRECISIONS
    for least in (least for least, _ in declared.CHECKED_LATE.values()):  # Lightning's own rule for the count
        GradientAccumulationScheduler({0: least})
        with pytest.raises(MisconfigurationException):
            GradientAccumulationScheduler({0: least - 1})


@pytest.mark.slow  # fresh interpreters: seconds
def test_the_command_line_refuses_in_one_line_and_exit_2(tmp_path, data_root, monkeypatch):
    """The two the door built Lightning's Trainer to refuse, and two declared ranges: no run dir made."""
    cases = [
        ("trainer.precision=13", "error: trainer.precision=13: choose one of"),
        ("trainer.accelerator=tpu", "error: trainer.accelerator=tpu: it needs the torch_xla package"),
        ("perf.data_wait=0", "error: perf.data_wait=0.0: must be above 0"),
        (
            "callbacks=early_stopping callbacks.early_stopping.mode=up",
            "error: callbacks.early_stopping.mode=up: ",
        ),
    ]
    for overrides, line in cases:
        if "torch_xla" in line and declared.importlib.util.find_spec("torch_xla") is not None:
            continue
        done = train(*overrides.split(), cwd=tmp_path, data_root=data_root)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(line), done.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def repeated_defaults(values: dict, schema) -> list[str]:
    """The keys of `values` (a yaml's, nested ones followed into their declarations) equal to `schema`'s default."""
    defaults = {item.name: item.default for item in declared_fields(schema)}
    found = []
    for name, value in values.items():
        default = defaults.get(name, object())
        if dataclasses.is_dataclass(default) and isinstance(value, (dict, DictConfig)):
            found += [f"{name}.{inner}" for inner in repeated_defaults(value, type(default))]
        elif name in defaults and value == default:
            found.append(name)
    return found


def test_the_repeat_finder_sees_a_planted_repeat():
    planted = {"name": "tensorboard"}
    assert repeated_defaults(planted, declared.TensorBoard) == ["name"]
    nested = {"model_summary": {"_target_": "pytorch_lightning.callbacks.RichModelSummary", "max_depth": 2}}
    assert repeated_defaults(nested, declared.Callbacks) == ["model_summary.max_depth"]


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_no_yaml_repeats_its_declaration_s_default(group, option):
    path = CONF / group / f"{option}.yaml"
    own = OmegaConf.to_container(OmegaConf.load(path))
    package = "@debug" if group == "debug" else ""  # a @package _global_ preset places its declaration
    assert own["defaults"] == [f"{option}_schema{package}", "_self_"]
    values = own.get("debug", {}) if group == "debug" else {k: v for k, v in own.items() if k != "defaults"}
    repeated = repeated_defaults(values, OPTIONS[group][option])
    assert not repeated, f"conf/{group}/{option}.yaml repeats its declaration's default of {repeated}"
    text = path.read_text()
    assert "src/harness/config/groups/trainer.py" in text and "python train.py" in text  # it still teaches
