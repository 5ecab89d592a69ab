"""Which devices and launches a run may use, checked at the door before torch is imported: `check_devices`,
`check_launch`, `check_torchrun_launch`, `processes` (docs/scaling.md)."""

from __future__ import annotations

import os

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.errors import ConfigError
from harness.ranks import under_torchrun


def _device_count(devices) -> int | None:
    """The count `trainer.devices` asks for (as Lightning reads it), None for auto / -1."""
    text = str(devices).strip() if isinstance(devices, str) else None
    if text in ("auto", "-1") or (
        isinstance(devices, int) and not isinstance(devices, bool) and devices == -1
    ):
        return None
    if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
        return devices
    if text is not None and text.isdigit() and int(text) >= 1:
        return int(text)
    ids = [part.strip() for part in text.split(",") if part.strip()] if text and "," in text else devices
    if isinstance(ids, (list, tuple, ListConfig)) and ids and all(str(i).isdigit() for i in ids):
        return len(ids)
    raise ConfigError(
        "trainer.devices",
        devices,
        "give a number of devices >= 1 (trainer.devices=1), a list of device ids "
        "(trainer.devices=[0,1]) or trainer.devices=auto",
    )


#: the sharded strategy the harness runs (conf/trainer/fsdp.yaml): the probes read whole layers under it
SHARDING = "harness.train.distributed.sharding.FSDP"
#: strategy_name of the sharded strategies: one process a device, as ddp
SHARDED = ("fsdp",)


def strategy_name(trainer: DictConfig) -> str:
    """`trainer.strategy` as a name: the string, `fsdp` for sharding.FSDP, else the `_target_`."""
    strategy = trainer.get("strategy", "auto")
    if isinstance(strategy, DictConfig):
        target = str(strategy.get("_target_", "auto"))
        return "fsdp" if target == SHARDING else target
    return str(strategy)


def _check_sharding(trainer: DictConfig) -> None:
    """Refuse FSDP1 (Lightning's FSDPStrategy) and a plain ModelParallelStrategy: the probes cannot read them."""
    strategy = trainer.get("strategy", "auto")
    given = str(strategy.get("_target_", "")) if isinstance(strategy, DictConfig) else str(strategy)
    if given == "fsdp" or given.startswith("fsdp_") or given.endswith("FSDPStrategy"):
        why = "Lightning's FSDPStrategy (FSDP1) flattens each block into one buffer: the probes would read one rank's slice"
    elif given.endswith("ModelParallelStrategy"):
        why = "a plain ModelParallelStrategy shards nothing and averages no gradient unless the module does"
    else:
        return
    raise ConfigError(
        "trainer.strategy", given, f"{why}; use trainer=fsdp (FSDP2, whole layers, the model's names)"
    )


def _one_process_per_device(strategy: str) -> bool:
    """Whether `strategy` (strategy_name) runs one process a device: ddp and the sharded ones."""
    return strategy.startswith("ddp") or strategy in SHARDED


def processes(trainer: DictConfig) -> int:
    """Processes the Trainer config asks for on this machine (under DDP, sharded, or auto strategies)."""
    strategy = strategy_name(trainer)
    devices = trainer.get("devices", 1)
    count = _device_count(devices)
    _check_sharding(trainer)
    if strategy.startswith("ddp_spawn"):
        raise ConfigError(
            "trainer.strategy",
            strategy,
            "spawned workers keep the stop step, probes and checks to "
            "themselves and return only the weights; use trainer=ddp (strategy: ddp)",
        )
    if _one_process_per_device(strategy) and count is None:
        raise ConfigError(
            "trainer.devices",
            devices,
            f"with {strategy} give the number of processes on each machine, "
            "e.g. trainer.devices=2: the harness checks it against the machine and the launcher",
        )
    if strategy.startswith("single"):
        return 1
    return count or 1  # auto devices: the GPUs there are (never more than the machine has), or 1 CPU process


def check_devices(trainer: DictConfig) -> None:
    """Refuse a GPU run without a GPU, more processes than the machine holds, or counts torchrun contradicts."""
    count, nodes = processes(trainer), trainer.get("num_nodes", 1)
    _check_torchrun(count, nodes)
    accelerator = trainer.get("accelerator", "auto")
    if count == 1 and nodes == 1 and accelerator not in ("gpu", "cuda"):
        return  # one process on whatever is there: nothing to count (and no torch import at the door)
    import torch

    gpus = torch.cuda.device_count()
    if accelerator in ("gpu", "cuda") and not gpus:
        raise ConfigError(
            "trainer.accelerator", accelerator, "no CUDA device is visible on this machine; use trainer=cpu"
        )
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and gpus):
        if count > gpus:
            raise ConfigError(
                "trainer.devices",
                count,
                f"this machine has {gpus} GPU(s); one DDP process a GPU (try trainer.devices={max(gpus, 1)})",
            )
    elif count > (os.cpu_count() or 1):
        raise ConfigError(
            "trainer.devices",
            count,
            f"this machine has {os.cpu_count()} CPU cores and no GPU; more "
            f"processes than cores only wait on each other "
            f"(try trainer.devices={os.cpu_count()})",
        )
    if nodes != 1 and "SLURM_JOB_ID" not in os.environ and "MASTER_ADDR" not in os.environ:
        raise ConfigError(
            "trainer.num_nodes",
            nodes,
            "several machines need something to start the ranks on each: "
            f"run with hydra/launcher=slurm hydra.launcher.nodes={nodes}, or under torchrun "
            f"--nnodes={nodes} on every machine (docs/scaling.md), or keep trainer.num_nodes=1",
        )


def _check_torchrun(count: int, nodes: int) -> None:
    """Under torchrun, `count` and `nodes` must be its processes on this machine and its machines."""
    started = under_torchrun()
    if started is None:
        return
    local, world = started
    if count != local:
        raise ConfigError(
            "trainer.devices",
            count,
            f"torchrun started {local} process(es) on this machine (--nproc-per-node={local}): "
            f"set trainer.devices={local}",
        )
    if nodes * local != world:
        raise ConfigError(
            "trainer.num_nodes",
            nodes,
            f"torchrun started {world} processes, {local} a machine: "
            f"set trainer.num_nodes={world // local} (torchrun's --nnodes)",
        )


def check_torchrun_launch(hydra_cfg: DictConfig, multirun: bool) -> None:
    """Under torchrun with several processes: no sweep, and a run dir every process names alike."""
    started = under_torchrun()
    if started is None or started[1] == 1:
        return
    _check_restarts()
    if multirun:
        raise ConfigError(
            "hydra.mode",
            "MULTIRUN",
            f"torchrun started {started[1]} processes for one run, and each would run the whole sweep; "
            "run the jobs one at a time (no -m), or sweep on a cluster with hydra/launcher=slurm",
        )
    named = str(OmegaConf.to_container(hydra_cfg.run, resolve=False)["dir"])
    if "${now:" in named:
        raise ConfigError(
            "hydra.run.dir",
            named,
            f"torchrun started {started[1]} processes and each names that folder by its own clock; "
            "give them one: hydra.run.dir=<a folder every machine sees>",
        )


def _check_restarts() -> None:
    """Refuse torchrun --max-restarts with one store for every attempt: restarted ranks would never meet."""
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    if restarts > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise ConfigError(
            "torchrun --max-restarts",
            restarts,
            "its restarted ranks would read the last attempt's addresses from the one store it keeps, and fail "
            "to meet; give torchrun --rdzv-backend=c10d (or --standalone) and export "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before it (a store for each attempt)",
        )


def on_cluster(launcher: DictConfig) -> bool:
    """Whether `launcher` (the composed hydra.launcher node) runs jobs on a cluster, which starts the ranks."""
    return str(launcher.get("_target_", "")).endswith("SlurmLauncher")


def check_launch(cfg: DictConfig, launcher: DictConfig, multirun: bool) -> None:
    """Refuse, before a job is queued, launches where DDP ranks would not meet."""
    count, nodes = processes(cfg.trainer), cfg.trainer.get("num_nodes", 1)
    if on_cluster(launcher):
        if (
            launcher.tasks_per_node != count
        ):  # also without DDP: SLURM would run the whole job that many times
            raise ConfigError(
                "hydra.launcher.tasks_per_node",
                launcher.tasks_per_node,
                f"SLURM starts the DDP ranks: one task a process, so it must equal "
                f"trainer.devices={count} (set hydra.launcher.tasks_per_node={count})",
            )
        if launcher.nodes != nodes:
            raise ConfigError(
                "hydra.launcher.nodes",
                launcher.nodes,
                f"must equal trainer.num_nodes={nodes}: Lightning counts the ranks from both "
                f"(set trainer.num_nodes={launcher.nodes} or hydra.launcher.nodes={nodes})",
            )
    elif multirun and count > 1:
        strategy = strategy_name(cfg.trainer)
        raise ConfigError(
            "trainer",
            strategy if _one_process_per_device(strategy) else "ddp",
            "in a local sweep Lightning would restart the whole sweep in every rank; "
            "run the jobs one at a time (no -m), or sweep on a cluster with "
            "hydra/launcher=slurm, where SLURM starts the ranks",
        )
