"""Settings past one process refused at the door, one line each: unsound DDP and torchrun counts, restarts
without a store for each attempt; a cluster job not held to this machine; each rank its own share of the
epoch; and a DDP sweep sent to SLURM."""

from __future__ import annotations

import pytest

from harness.cli.overrides import check_overrides
from tests.conftest import ROOT

# --- refused at the door, one line each ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["trainer=ddp", "trainer.devices=4096"], "trainer.devices=4096"),
        (["trainer=ddp", "trainer.num_nodes=2"], "trainer.num_nodes=2"),
        (["-m", "trainer=ddp", "data.length=10,20"], "trainer=ddp"),
        (["experiment=vanishing_gradients", "trainer=ddp"], "trainer=ddp"),  # a preset that sweeps without -m
        (
            ["-m", "hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4"],
            "hydra.launcher.tasks_per_node=1",
        ),
        (
            ["-m", "hydra/launcher=slurm", "hydra.launcher.nodes=2", "data.length=10,20"],
            "hydra.launcher.nodes=2",
        ),
        (
            ["-m", "hydra/launcher=slurm", "hydra.launcher.tasks_per_node=4", "data.length=10,20"],
            "hydra.launcher.tasks_per_node=4",
        ),
        (["trainer=ddp", "trainer.devices=auto"], "trainer.devices=auto"),
        (["trainer=ddp", "trainer.strategy=ddp_spawn"], "trainer.strategy=ddp_spawn"),
        (["compile=inductr"], "compile=inductr"),
        (["compile=3"], "compile=3"),
    ],
    ids=[
        "devices",
        "nodes",
        "local-sweep",
        "preset-sweep",
        "slurm-tasks",
        "slurm-nodes",
        "slurm-tasks-no-ddp",
        "ddp-auto",
        "ddp-spawn",
        "backend",
        "compile-type",
    ],
)
def test_unsound_scale_settings_are_refused(argv, names, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(SystemExit) as stop:
        check_overrides(argv, ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and names in lines[0], lines


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["trainer=fsdp", "trainer.devices=1"], "trainer.devices=1: torchrun started 2 process(es)"),
        (["trainer=ddp", "trainer.devices=2"], "trainer.num_nodes=1: torchrun started 4 processes"),
        (["trainer=fsdp", "trainer.devices=2", "trainer.num_nodes=2"], None),
    ],
    ids=["devices", "nodes", "agree"],
)
def test_counts_that_disagree_with_torchruns_are_refused_at_the_door(
    argv, refused, capsys, monkeypatch, tmp_path
):
    """Under `torchrun --nnodes=2 --nproc-per-node=2` (4 processes, 2 a machine): Lightning would otherwise look
    for a device that is not there once the preflight has run, or wait for ranks that never come."""
    torchrun = {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}
    for name, value in {**torchrun, "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    argv = [*argv, f"hydra.run.dir={tmp_path / 'run'}"]  # one dir for every process (below: without it)
    if refused is None:
        check_overrides(argv, ROOT / "conf")
        with pytest.raises(SystemExit) as stop:  # each process would name its own dir by the time
            check_overrides(argv[:-1], ROOT / "conf")
        line = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and line.startswith("error: hydra.run.dir=") and "torchrun" in line, line
        with pytest.raises(SystemExit) as stop:  # every process would run the whole sweep
            check_overrides(["-m", *argv, "n=1,2"], ROOT / "conf")
        line = capsys.readouterr().err.strip()
        assert (
            stop.value.code == 2 and line.startswith("error: hydra.mode=MULTIRUN") and "torchrun" in line
        ), line
        return
    with pytest.raises(SystemExit) as stop:
        check_overrides(argv, ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and refused in lines[0], lines


def test_torchrun_restarts_need_a_store_for_each_attempt(capsys, monkeypatch, tmp_path):
    """torchrun --max-restarts with its one shared store: refused in one line naming torch's switch; with the switch
    (each attempt its own store, TORCHELASTIC_USE_AGENT_STORE then False), or without restarts, allowed."""
    torchrun = {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2"}
    for name, value in {**torchrun, "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_MAX_RESTARTS": "2"}.items():
        monkeypatch.setenv(name, value)
    argv = ["trainer=ddp", "trainer.devices=1", "trainer.num_nodes=2", f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    with pytest.raises(SystemExit) as stop:
        check_overrides(argv, ROOT / "conf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1, lines
    assert (
        lines[0].startswith("error: torchrun --max-restarts=2:")
        and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in lines[0]
    )
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    check_overrides(argv, ROOT / "conf")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    check_overrides(argv, ROOT / "conf")


def test_a_cluster_job_is_not_held_to_this_machine(monkeypatch):
    """On the login node: 8 GPUs a job, 2 machines, none of it here; the job checks its devices where it runs."""
    check_overrides(
        [
            "-m",
            "hydra/launcher=slurm",
            "hydra.launcher.nodes=2",
            "hydra.launcher.tasks_per_node=8",
            "hydra.launcher.gpus_per_node=8",
            "trainer=ddp",
            "trainer.accelerator=gpu",
            "trainer.devices=8",
            "trainer.num_nodes=2",
            "data.length=10,20",
        ],
        ROOT / "conf",
    )


def test_each_rank_reads_its_own_share_of_the_epoch(monkeypatch):
    from harness.data import sampler

    shares = []
    for rank in (0, 1):
        monkeypatch.setattr(sampler, "_rank_and_world", lambda rank=rank: (rank, 2))
        order = sampler.EpochPermutation(11, seed=3)
        order.set_epoch(1)
        shares.append(list(order))
        assert len(order) == 5 and order.num_replicas == 2 and order.rank == rank
    assert len(shares[0]) == len(shares[1]) == 5  # the same number of steps on every rank
    assert not set(shares[0]) & set(shares[1]), shares  # disjoint
    monkeypatch.setattr(sampler, "_rank_and_world", lambda: (0, 1))
    alone = sampler.EpochPermutation(11, seed=3)
    alone.set_epoch(1)
    assert sorted(shares[0] + shares[1]) == sorted(list(alone)[:10])  # together: one epoch, remainder dropped
