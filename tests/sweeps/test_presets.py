"""The sweep presets and launchers compose: the vanishing-gradients preset's nine jobs and its known result at
initialization, the overfit ladder and text LM presets, and launchers that extend the plugins' own configs."""

from __future__ import annotations

import itertools

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.types import RunMode
from omegaconf import OmegaConf

from harness.seeding import seed_all
from harness.tasks.training import build
from harness.tasks.validate import validate
from tests.conftest import CONF

# --- the known result, at initialization ---------------------------------------------------------------------


def init_reach(make_config, model: str, length: int) -> float:
    """Gradient reach of the built-in `model` at initialization, built as train.py builds it (the real configs,
    harness.tasks.training's order), on the first 4 validation examples of the first_token data of `length` (the
    grad_by_position probe also measures on 4 examples)."""
    position = pytest.importorskip("harness.probes.tokens.reach", reason="a fork without src/harness/probes/")
    cfg = make_config(
        f"model={model}", f"data.length={length}", "data.rule=first_token", "mode=full", "data.batch_size=4"
    )
    # as run() does: subnormals would make the RNN's backward crawl
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    seed_all(cfg.seed)
    data = build(cfg.data, "data")
    data.prepare_data()
    data.setup("fit")
    net = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    batch = next(iter(data.val_dataloader()))
    norms = position.input_grad_by_position(net, batch)
    assert norms.dtype == torch.float32 and norms.shape == (length,)
    return position.reach(norms.tolist())


def test_tanh_rnn_reach_vanishes_with_length_the_transformers_does_not(make_config):
    """At init the tanh RNN's reach falls by orders of magnitude from length 10 to 50 and underflows to exactly
    0 in float32 at 200; the transformer's stays within a factor of 10 of 1 at every length."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 4 examples: a second thread only adds waiting, badly so on a busy machine
    try:
        rnn = {length: init_reach(make_config, "rnn", length) for length in (10, 50, 200)}
        transformer = {length: init_reach(make_config, "transformer", length) for length in (10, 50, 200)}
    finally:
        torch.set_num_threads(threads)
    assert 1e-6 < rnn[10] < 0.1, rnn
    assert 0 < rnn[50] < 1e-6 * rnn[10], f"from length 10 to 50 the reach should fall >= 6 orders: {rnn}"
    assert rnn[200] == 0.0, f"at length 200 the first position's gradient should underflow to 0: {rnn}"
    assert all(0.1 <= r <= 10 for r in transformer.values()), (
        f"attention keeps the reach near 1: {transformer}"
    )


# --- presets and launchers compose -----------------------------------------------------------------------------


def sweep_jobs(preset: str) -> list[list[str]]:
    """The overrides of every job the preset's hydra.sweeper.params expands to."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        hydra = compose(
            config_name="train", overrides=[f"experiment={preset}"], return_hydra_config=True
        ).hydra
    assert hydra.mode == RunMode.MULTIRUN, f"{preset} should sweep even without -m"
    params = OmegaConf.to_container(hydra.sweeper.params)
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in params.items()]
    return [list(job) for job in itertools.product(*axes)]


def test_vanishing_gradients_preset_expands_to_nine_valid_jobs(make_config):
    jobs = sweep_jobs("vanishing_gradients")
    assert sorted(tuple(sorted(j)) for j in jobs) == sorted(
        tuple(sorted((f"model={m}", f"data.length={n}")))
        for m in ("rnn", "lstm", "transformer")
        for n in (10, 50, 200)
    )
    for job in jobs:
        cfg = make_config("experiment=vanishing_gradients", *job)
        validate(cfg)
        assert cfg.data.rule == "first_token" and cfg.mode.name == "full" and cfg.mode.max_steps <= 500
        model = dict(override.split("=") for override in job)["model"]
        assert cfg.model._target_.rsplit(".", 1)[1].lower() == model  # RNN, LSTM, Transformer


def test_overfit_ladder_and_text_lm_presets(make_config):
    assert sweep_jobs("overfit_ladder") == [["n=1"], ["n=2"], ["n=5"]]
    for n in (1, 2, 5):
        cfg = make_config("experiment=overfit_ladder", f"n={n}")
        validate(cfg)
        assert cfg.mode.name == "overfit" and cfg.n == n
    cfg = make_config("experiment=text_lm")
    validate(cfg)
    assert (
        cfg.data._target_.endswith("TextDataModule")
        and cfg.mode.name == "full"
        and cfg.mode.max_steps <= 2000
    )


def compose_launcher(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        return compose(
            config_name="train", overrides=list(overrides), return_hydra_config=True
        ).hydra.launcher


def test_launchers_extend_the_plugins_configs():
    parallel = compose_launcher("hydra/launcher=parallel", "hydra.launcher.n_jobs=3")
    assert (
        parallel._target_.endswith("JoblibLauncher")
        and parallel.n_jobs == 3
        and parallel.prefer == "processes"
    )
    local = compose_launcher("hydra/launcher=local")
    assert local._target_.endswith("submitit_launcher.LocalLauncher") and local.timeout_min == 60
    slurm = compose_launcher("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.nodes=2")
    assert slurm._target_.endswith("SlurmLauncher")
    assert (slurm.partition, slurm.nodes, slurm.gpus_per_node, slurm.timeout_min) == ("gpu", 2, 1, 60)
    with pytest.raises(Exception, match="n_jobz"):  # the plugin's schema came along: a typo is refused
        compose_launcher("hydra/launcher=parallel", "hydra.launcher.n_jobz=3")
    with pytest.raises(Exception, match="gpus_per_node"):
        compose_launcher("hydra/launcher=slurm", "hydra.launcher.gpus_per_node=two")
