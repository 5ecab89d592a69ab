"""Every bad value is refused at the door: one line naming the key, exit 2, before any data or preflight work; a
value a built-in part's library would refuse as it builds is refused there too, by the key's declaration."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from harness.cli.overrides import check_overrides
from harness.errors import ConfigError
from tests.cli.conftest import refused
from tests.conftest import CONF, PROBES_OFF, run_command, sampled


@pytest.fixture
def no_wandb_key(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


BAD_VALUES = [
    ("optim.lr=abc", "optim.lr=abc: optim.lr must be a number"),
    ("optim.lr=-1", "optim.lr=-1: must be >= 0"),
    ("trainer.devices=0", "trainer.devices=0:"),
    ("trainer.devices=-2", "trainer.devices=-2:"),
    (
        "trainer.gradient_clip_val=abc",
        "trainer.gradient_clip_val=abc: trainer.gradient_clip_val must be a number",
    ),
    ("logger.mode=bogus", "logger.mode=bogus: no such key"),
    ("logger=wandb logger.wandb.mode=bogus", "logger.wandb.mode=bogus: choose one of offline, online"),
    ("logger=wandb logger.wandb.mode=online", "logger.wandb.mode=online: no wandb API key"),
    ("mode=full data.batch_size=-1", "data.batch_size=-1: must be >= 1"),
    ("model.d_model=0", "model.d_model=0: must be >= 1"),
    ("model=rnn model.layers=1.5", "model.layers=1.5: model.layers must be a whole number"),
    ("probes=off +overwrite=yes", "overwrite=yes: must be true or false"),
]


@pytest.mark.parametrize(("overrides", "line"), sampled(BAD_VALUES, every=2), ids=[o for o, _ in BAD_VALUES])
def test_bad_value_is_one_line_naming_the_key_before_any_work(
    overrides, line, capsys, tmp_path, no_wandb_key
):
    run_dir, data_root = tmp_path / "run", tmp_path / "data"
    message = refused(capsys, *overrides.split(), f"hydra.run.dir={run_dir}", f"data.root={data_root}")
    assert message.startswith(f"error: {line}"), message
    assert not run_dir.exists() and not data_root.exists()  # no data made, no preflight run


def test_a_wandb_server_out_of_reach_is_refused_at_once(capsys, monkeypatch, tmp_path):
    """With a key but no network wandb waits 90 s and then raises; the door tries the server for a few seconds."""
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    started = time.perf_counter()
    message = refused(capsys, "logger=wandb", "logger.wandb.mode=online", f"hydra.run.dir={tmp_path}/run")
    assert "logger.wandb.mode=online: cannot reach 127.0.0.1:9" in message and "mode=offline" in message
    assert time.perf_counter() - started < 60  # wandb's own wait is 90 s


def test_a_wandb_key_in_netrc_counts(capsys, monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1\n  login user\n  password " + "0" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    message = refused(capsys, "logger=wandb", "logger.wandb.mode=online", f"hydra.run.dir={tmp_path}/run")
    assert "cannot reach" in message  # past the key: the netrc entry was found


def test_good_values_of_other_kinds_pass(tmp_path):
    for overrides in (
        ["trainer.devices='1'"],  # a list of ids ([0]) is a GPU's: Lightning refuses it on the CPU
        ["trainer.devices=auto"],
        ["optim.lr=1"],
        ["trainer.gradient_clip_val=null"],
    ):
        check_overrides([*overrides, f"hydra.run.dir={tmp_path}/run"], CONF)


def test_a_full_run_shorter_than_its_validation_period_is_warned_of_once_naming_both_keys(capsys, tmp_path):
    check_overrides(["mode=full", "mode.max_steps=20,30", f"hydra.sweep.dir={tmp_path}/sweep", "-m"], CONF)
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 2, warned  # one a value of the sweep, each once
    assert all("mode.val_every=200" in line and "no validation will run" in line for line in warned), warned
    assert "mode.max_steps=20 " in warned[0] and "mode.max_steps=30 " in warned[1], warned
    for quiet in (
        ["mode=full", "mode.max_steps=20", "mode.val_every=10"],
        ["mode=overfit", "mode.max_steps=20"],
    ):
        check_overrides([*quiet, f"hydra.run.dir={tmp_path}/run"], CONF)
        assert "warning:" not in capsys.readouterr().err, quiet


def test_an_unquoted_non_ascii_value_is_told_how_to_quote(capsys):
    message = refused(capsys, "data.alphabet=αβγ")
    assert "data.alphabet=αβγ" in message and "\"data.alphabet='αβγ'\"" in message


def test_devices_read_as_lightning_reads_them(make_config):
    from harness.train.distributed.devices import processes

    assert processes(make_config("trainer.devices=3").trainer) == 3  # strategy auto: Lightning picks DDP
    assert processes(make_config("trainer.devices=[0,1]").trainer) == 2
    assert processes(make_config("trainer.devices=auto").trainer) == 1
    assert processes(make_config("trainer=ddp").trainer) == 2
    assert processes(make_config("trainer.devices=4", "+trainer.strategy=single_device").trainer) == 1


def test_several_devices_under_strategy_auto_are_held_against_the_cores(capsys, monkeypatch):
    """trainer.devices=8 with strategy auto started 8 DDP processes on a 2-core machine."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the machine's size, not a part under test
    message = refused(capsys, "trainer.devices=8")
    assert message.startswith("error: trainer.devices=8: this machine has 2 CPU cores"), message
    message = refused(capsys, "-m", "trainer.devices=2", "n=1,2")
    assert "in a local sweep" in message  # a local sweep with DDP is refused, chosen by auto or not


def test_a_read_only_data_root_is_refused_naming_it(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    message = refused(capsys, f"data.root={tmp_path}/file/data", f"hydra.run.dir={tmp_path}/run")
    assert message.startswith(f"error: data.root={tmp_path}/file/data: cannot write there"), message


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs /sys, which no one may write")
def test_an_existing_read_only_data_root_is_refused_when_the_dataset_must_be_made(make_config):
    from harness.tasks.training import run

    with pytest.raises(ConfigError, match=r"^data.root=/sys: cannot write the dataset there"):
        run(make_config("data.root=/sys", "preflight=false", *PROBES_OFF))


def test_bad_values_through_train_py_exit_2_in_one_line(run_train, tmp_path):
    """The real command line: one line on stderr, exit 2, and Hydra never started (no run dir)."""
    for override in ("optim.lr=abc", "trainer.devices=0", "model.d_model=0"):
        result = run_train(override)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and override in lines[0], result.stderr[-2000:]
        assert not (tmp_path / "run").exists()


def test_the_trainer_argument_lightning_refuses_is_named(make_config):
    """Past the door (a value only Lightning checks): the key is named, not `trainer.?`."""
    from harness.tasks.training import build_trainer

    cfg = make_config("+trainer.profiler=bogus")
    with pytest.raises(ConfigError, match=r"^trainer.profiler=bogus: Lightning refuses it"):
        build_trainer(cfg, Path(cfg.hydra.runtime.output_dir), [], [])


# -- what a library would refuse as it builds, declared: refused at the door, nothing built ------------------------

LIBRARY_REFUSALS = [
    # (overrides, the start of the line: the key at fault and its value, and why)
    (
        "optim=sgd optim.nesterov=true optim.momentum=0",
        "optim.nesterov=true: torch.optim.SGD refuses it (Nesterov",
    ),
    ("optim.lr=nan", "optim.lr=nan: must be a number, not nan"),
    (
        "optim.lr=0.01 optim.betas=[2,0.9]",
        "optim.betas=[2.0, 0.9]: torch.optim.AdamW refuses it",
    ),  # lr is fine
    ("trainer.precision=13", "trainer.precision=13: choose one of"),
    ("trainer.accelerator=tpu", "trainer.accelerator=tpu: it needs the torch_xla package"),
    ("+trainer.detect_anomaly=x", "trainer.detect_anomaly=x: Lightning's Trainer takes true or false"),
    ("+trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0: must be"),  # Lightning: at fit
    ("+trainer.bogus=1", "trainer.bogus=1: Lightning's Trainer takes no argument by this name"),
    ("model.dropout=2", "model.dropout=2: must be <= 1"),
    ("model=gpt model.heads=3", "model.heads=3: must divide model.d_model=128"),
    ("loss=label_smoothing loss.smoothing=2", "loss.smoothing=2: "),
    ("probes.grad_by_position.examples=0", "probes.grad_by_position.examples=0: must be >= 1"),
    ("data.alphabet=''", "data.alphabet='': must be a non-empty string"),
    ("data.labels=''", "data.labels='': must be a non-empty string"),
    (
        "-m n=1,2 trainer.precision=32-true,13",
        "trainer.precision=13: choose one of",
    ),  # one job's value
    ("-m hydra/launcher=parallel hydra.launcher.n_jobs=0 n=1,2", "hydra.launcher.n_jobs=0: "),
    ("-m hydra/launcher=parallel hydra.launcher.batch_size=0 n=1,2", "hydra.launcher.batch_size=0: "),
]


@pytest.mark.parametrize(
    ("overrides", "line"), sampled(LIBRARY_REFUSALS), ids=[o for o, _ in LIBRARY_REFUSALS]
)
def test_a_value_a_library_refuses_when_it_builds_is_one_line_naming_the_key(
    overrides, line, capsys, tmp_path
):
    """Declared ranges and the targets' signatures name what the optimizer, Trainer, model, loss, probes and data
    source would refuse, and a sweep's launcher is made as its plugin makes it: before any work, nothing built."""
    if "torch_xla" in line and importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here: a TPU accelerator is not refused for its package")
    run_dir, data_root = tmp_path / "run", tmp_path / "data"
    message = refused(
        capsys,
        *overrides.split(),
        f"hydra.run.dir={run_dir}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"data.root={data_root}",
    )
    assert message.startswith(f"error: {line}"), message
    assert not run_dir.exists() and not data_root.exists() and not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_the_config_files_values_all_build():
    """The other side of the refusals above: every config file's own values pass the door (no refusal without a
    value given), whichever option of each group."""
    for overrides in (
        [],
        ["optim=sgd"],
        ["schedule=cosine"],
        ["schedule=linear", "mode=full"],
        ["data=text"],
        ["callbacks=rich"],
        ["-m", "hydra/launcher=parallel", "n=1,2"],
        ["-m", "hydra/launcher=local", "n=1,2"],
        ["debug=profiler"],  # a value that reads the job's own dir (${hydra:runtime.output_dir})
        ["model=hf"],
        ["data=corpus"],
        ["debug=fdr"],
        ["model=gpt", "model.size=gpt2"],
        ["model=lstm", "loss=z_loss"],
        ["experiment=lm"],
        ["trainer=ddp"],
        ["trainer=fsdp"],  # the strategy's _target_ held to its signature
    ):
        assert check_overrides([*overrides, "hydra.run.dir=unused", "hydra.sweep.dir=unused"], CONF) == []


def test_a_typo_is_refused_before_torch_is_imported(tmp_path):
    """The targets' check needs torch and Lightning; a mistake the cheap checks see costs none of that import time."""
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('heavy:', [m for m in ('torch', 'pytorch_lightning') if m in sys.modules]))\n"
        f"sys.argv = ['train.py', 'optim.lr=-1', 'hydra.run.dir={tmp_path}/run']\n"
        "from harness.cli import main\n"
        f"main({str(CONF)!r})\n"
    )
    started = time.perf_counter()
    result = run_command(sys.executable, "-c", probe, cwd=tmp_path)
    assert result.returncode == 2 and "heavy: []" in result.stdout, result.stdout + result.stderr[-2000:]
    assert result.stderr.strip().startswith("error: optim.lr=-1: must be >= 0"), result.stderr
    assert time.perf_counter() - started < 10  # well under the ~5 s torch and Lightning take on their own


@pytest.mark.slow  # two train.py runs that import torch and Lightning at the door: ~15 s
def test_a_library_refusal_through_train_py_is_one_line_and_exit_2(run_train, tmp_path):
    for override in ("optim.lr=nan", "trainer.precision=13"):
        result = run_train(override)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
        assert (
            lines[0].startswith(f"error: {override}: ") and "Traceback" not in result.stdout + result.stderr
        )
        assert not (tmp_path / "run").exists()
