"""Every config option composes and validates; bad values are refused with the key named."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from harness.errors import ConfigError
from harness.tasks.validate import validate
from tests.conftest import CONF, sampled


def _folder_dataset(root) -> str:
    from harness.data.format import write_dataset

    splits = {"train": [{"text": "ab" * 16, "label": "1"}] * 4, "val": [{"text": "ba" * 16, "label": "0"}]}
    return str(write_dataset(root / "mine", splits, task="classify", alphabet="ab01", length=32, source={}))


def _parquet_file(root) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a line of text"] * 8}), root / "train.parquet")
    return str(root / "train.parquet")


OPTIONS = [
    (group.name, option.stem)
    for group in sorted(CONF.iterdir())
    if group.is_dir() and group.name != "hydra"
    for option in sorted(group.glob("*.yaml"))
]


def test_every_group_has_options():
    groups = {g for g, _ in OPTIONS}
    assert {"model", "data", "mode", "trainer", "logger"} <= groups
    assert {("model", m) for m in ("transformer", "rnn", "lstm")} <= set(OPTIONS)


@pytest.mark.parametrize(("group", "option"), sampled(OPTIONS, every=2), ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_validates(group, option, make_config, tmp_path):
    extra = {
        ("data", "folder"): [f"data.path={_folder_dataset(tmp_path)}"],
        ("tokenizer", "bpe"): ["data=corpus"],  # the tokenizers other than char are data=corpus's
        ("tokenizer", "hf"): ["data=corpus", f"tokenizer.path={tmp_path}"],
        ("mode", "eval"): ["ckpt_path=last"],  # eval measures a checkpoint
        ("data", "hf"): [f"data.path={_parquet_file(tmp_path)}"] if (group, option) == ("data", "hf") else [],
    }.get((group, option), [])
    cfg = make_config(f"{group}={option}", *extra)
    if (group, option) == ("trainer", "gpu") and not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="trainer.accelerator=gpu: no CUDA device"):
            validate(cfg)
    else:
        validate(cfg)
    OmegaConf.to_container(cfg.model, resolve=True)
    OmegaConf.to_container(cfg.data, resolve=True)


def test_every_config_line_is_commented():
    """Configs teach: every key of every file under conf/ carries a comment (on its line or just above)."""
    for path in sorted(CONF.rglob("*.yaml")):
        lines = path.read_text().splitlines()
        assert lines[0].startswith("#"), f"{path} opens without a comment saying what it is"
        for i, line in enumerate(lines):
            stripped = line.strip()
            if (
                not stripped
                or stripped.startswith("#")
                or stripped.startswith("- ")
                or stripped.endswith(":")
            ):
                continue
            if stripped.startswith(("_target_", "name:", "# @package")):
                continue
            above = lines[i - 1].strip() if i else ""
            assert "#" in line or above.startswith("#"), f"{path}:{i + 1} has no comment: {line!r}"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("n=0", "n"),
        ("data.length=0", "data.length"),
        ("preflight=maybe", "preflight"),
        ("mode.max_steps=0", "mode.max_steps"),
        ("seed=-1", "seed"),
        ("mode=full mode.ckpt_every=0", "mode.ckpt_every"),
        ("tokenizer=bpe", "tokenizer"),  # synthetic data has its own alphabet: a BPE would be ignored
        ("schedule.shape=step", "schedule.shape"),  # at the door, not when the trainer builds the schedule
        ("schedule=cosine schedule.min_lr=1.0", "schedule.min_lr"),
    ],
)
def test_bad_values_are_refused_naming_the_key(override, key, make_config):
    with pytest.raises(ConfigError) as err:
        validate(make_config(*override.split()))
    assert str(err.value).startswith(f"{key}="), err.value


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("n=abc", "n=abc: n must be a whole number, not 'abc'"),
        ("n=1.5", "n=1.5: n must be a whole number, not 1.5"),
        ("mode.target_loss=low", "mode.target_loss=low: mode.target_loss must be a number, not 'low'"),
        ("flush_denormal=maybe", "flush_denormal=maybe: flush_denormal must be true or false, not 'maybe'"),
        (
            "mode.max_step=5",
            "mode.max_step=5: no such key, check its spelling; keys under mode: name, max_steps",
        ),
        ("mode=fast", "mode=fast: no such option; choose one of eval, full, overfit"),
    ],
)
def test_schema_refuses_a_wrong_type_while_composing(override, expected, capsys, tmp_path, monkeypatch):
    """The schema (harness/config/schema.py) types harness's own keys: Hydra refuses the value before anything runs,
    and the command line says which key and what it takes, in one line."""
    from harness.cli.overrides import check_overrides

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check_overrides([override], CONF)
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {expected}")


def test_schema_leaves_a_new_top_level_key_to_a_plus(make_config, tmp_path):
    """A fork's own key still goes in with a +, as Hydra documents, schema or not."""
    (tmp_path / "preflight_mine.py").write_text("# a fork's own preflight checks\n")
    cfg = make_config(f"+preflight_tests=[{tmp_path / 'preflight_mine.py'}]", "+my_key=3")
    assert cfg.my_key == 3 and list(cfg.preflight_tests) == [str(tmp_path / "preflight_mine.py")]


def test_an_argument_the_target_does_not_take_is_named(make_config):
    """Whether Hydra builds the object now (model) or a partial harness calls later (optim)."""
    from harness.config import build

    for override, key in (("+model.depth=3", "model.depth"), ("+optim.momentum=0.9", "optim.momentum")):
        cfg = make_config(override)
        node = key.split(".")[0]
        with pytest.raises(ConfigError) as err:
            build(cfg[node], node, **({"vocab_size": 5} if node == "model" else {}))
        assert str(err.value).startswith(f"{key}=") and "takes no argument" in str(err.value), err.value


def test_every_mode_is_one_entry_of_one_table_and_each_has_its_typed_config():
    """The schema's MODES names every mode once: its typed config (each conf/mode/*.yaml starts from it) and the
    class that trains in it; mode=eval (harness.tasks.evaluate) trains in none."""
    from hydra.utils import get_class

    from harness.config.schema import MODES
    from tests.conftest import CONF

    assert sorted(MODES) == sorted(p.stem for p in (CONF / "mode").glob("*.yaml"))
    for name, (schema, regime) in MODES.items():
        assert f"{name}_schema" in (CONF / "mode" / f"{name}.yaml").read_text()
        assert schema().name == name and (regime is None) == (name == "eval")
        assert regime is None or get_class(regime).name == name


def test_validation_runs_once_per_job(make_config, monkeypatch, tmp_path):
    """The door validates every job's config before anything runs; the job it started checks only its machine."""
    import harness.cli.overrides  # noqa: F401  (its validate is looked up when the door runs)
    import harness.tasks.training
    import harness.tasks.validate
    from harness.cli.overrides import check_overrides
    from harness.tasks.job import perform
    from tests.conftest import CONF, PROBES_OFF

    seen = []
    real = harness.tasks.validate.validate

    def counted(cfg, *args, **kwargs):
        seen.append(cfg.n)
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(harness.tasks.validate, "validate", counted)  # the door's
    monkeypatch.setattr(harness.tasks.training, "validate", counted)  # a job's
    check_overrides(["-m", "n=1,2", f"hydra.sweep.dir={tmp_path}/sweep"], CONF)
    assert sorted(seen) == [1, 2]  # once for each job of the sweep
    seen.clear()
    quick = ("preflight=false", "mode.max_steps=2", *PROBES_OFF)
    perform(make_config(*quick, run_dir=tmp_path / "checked"), checked=True)
    assert seen == []  # the door has done it: the job holds only its devices against this machine
    perform(make_config(*quick, run_dir=tmp_path / "in_code"))
    assert seen == [2]  # called in code, without the door: the whole config, once
