"""Sharded training (trainer=fsdp) set up in one process: the units taken from the model's repeated blocks, the
parameters under the model's own names, the door's rules, and a model built on the meta device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.cli.overrides import check_overrides
from harness.models import GPT, Transformer
from harness.train.distributed.devices import processes
from harness.train.distributed.sharding import materialize, unit_names
from tests.conftest import (
    ROOT,
)

# --- the units: the model's repeated blocks ---------------------------------------------------------------------


class Inner(nn.Module):
    """A block that holds a ModuleList of its own (two heads): inside a unit, so no unit itself."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.mixed = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])  # not one class: looked inside, no unit
        self.stack = nn.Sequential(nn.ModuleList(Inner() for _ in range(3)))


def test_units_are_the_repeated_children_of_a_module_list():
    assert unit_names(GPT(vocab_size=20, max_len=12)) == [f"blocks.{i}" for i in range(4)]
    assert unit_names(Transformer(vocab_size=20, max_len=12, d_model=16, layers=3)) == [
        "blocks.0",
        "blocks.1",
        "blocks.2",
    ]
    assert unit_names(Nested()) == ["stack.0.0", "stack.0.1", "stack.0.2"]  # the outermost list only
    assert unit_names(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) == []  # no list: the root unit alone


def test_units_of_a_hugging_face_model_are_its_layers():
    pytest.importorskip("transformers")
    from harness.models import HFCausalLM

    model = HFCausalLM(vocab_size=20, arch="llama", max_len=12, d_model=16, layers=2, heads=2)
    assert unit_names(model) == ["lm.model.layers.0", "lm.model.layers.1"]


def test_parameter_names_are_the_models_own_under_any_wrapper():
    """A wrapper's infix (FSDP1's, wrapper-style activation checkpointing's, torch.compile's) is not a name of
    the model: the probes log `blocks.0.weight` whichever wraps it."""
    from harness.probes.layers.norms import parameter_names

    inner = nn.Module()
    inner._checkpoint_wrapped_module = nn.Linear(2, 2)
    wrapped = nn.Module()
    wrapped._fsdp_wrapped_module = nn.ModuleDict({"blocks": nn.ModuleList([inner])})
    names = [name for name, _ in parameter_names(wrapped)]
    assert names == ["blocks.0.weight", "blocks.0.bias"], names


# --- the door ---------------------------------------------------------------------------------------------------


def test_fsdp_runs_one_process_a_device(make_config):
    assert processes(make_config("trainer=fsdp").trainer) == 2


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["-m", "trainer=fsdp", "data.length=10,20"], "trainer=fsdp"),
        (["trainer=fsdp", "trainer.devices=auto"], "trainer.devices=auto"),
        (["trainer=fsdp", "trainer.strategy.mixed_precision=fp8"], "trainer.strategy.mixed_precision=fp8"),
        (["trainer=fsdp", "trainer.devices=4096"], "trainer.devices=4096"),
        (["trainer=ddp", "trainer.strategy=fsdp"], "trainer.strategy=fsdp: Lightning's FSDPStrategy (FSDP1)"),
        (
            ["trainer=ddp", "+trainer.strategy._target_=pytorch_lightning.strategies.ModelParallelStrategy"],
            "trainer.strategy=pytorch_lightning.strategies.ModelParallelStrategy: a plain",
        ),
    ],
    ids=["local-sweep", "auto", "precision", "devices", "fsdp1", "model-parallel"],
)
def test_unsound_fsdp_settings_are_refused(argv, names, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(SystemExit) as stop:
        check_overrides(argv, ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and names in lines[0], lines


def test_one_sharded_process_passes_the_door():
    """One rank: the door builds the Trainer but fits nothing with it (its one-step trial module has no model to
    shard); the run itself shards the harness's module."""
    overrides = ["trainer=fsdp", "trainer.devices=1", "hydra.run.dir=unused", "hydra.sweep.dir=unused"]
    assert check_overrides(overrides, ROOT / "conf") == []


def test_a_sharded_checkpoint_folder_is_refused_with_how_to_make_it_one_file(tmp_path):
    from harness.errors import ConfigError
    from harness.train.checkpoints import read_checkpoint

    folder = tmp_path / "last.ckpt"  # what save_distributed_checkpoint=true writes: a folder
    folder.mkdir()
    with pytest.raises(ConfigError) as err:
        read_checkpoint(str(folder))
    assert str(err.value).startswith(f"ckpt_path={folder}") and "consolidate_checkpoint" in str(err.value)


# --- a model too large for one rank: built on the meta device, its weights made once sharded ----------------------


def test_init_weights_sets_every_parameter_of_a_gpt_made_on_the_meta_device():
    """Materialized from the meta device (empty memory), then init_weights(): the same weights as a whole model
    given init_weights() from the same seed, every one of them (empty memory left anywhere would differ), tied."""
    whole = GPT(vocab_size=20, max_len=16)
    torch.manual_seed(0)
    whole.init_weights()
    with torch.device("meta"):
        empty = GPT(vocab_size=20, max_len=16)
    torch.manual_seed(0)  # rank 0 draws from the run's seed
    materialize(empty, torch.device("cpu"), rank=0)
    assert empty.head.weight is empty.token_embedding.weight, "the tie was lost"
    for (name, a), b in zip(whole.state_dict().items(), empty.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_model_without_init_weights_is_refused_for_meta_init(capsys):
    with pytest.raises(SystemExit) as stop:
        check_overrides(["trainer=fsdp", "trainer.strategy.meta_init=true", "model=rnn"], ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: trainer.strategy.meta_init=") and "has no init_weights()" in lines[0]
