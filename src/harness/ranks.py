"""Which rank this process is, known before the Trainer exists, read from torchrun's, SLURM's or Lightning's
variables (docs/scaling.md): `global_rank`, `started_by_lightning`, `restarted`, `under_torchrun`."""

from __future__ import annotations

import os

#: where torchrun and SLURM put the global rank
RANK_VARIABLES = ("RANK", "SLURM_PROCID")


def global_rank() -> int:
    """0 for the run's first process (the one that writes the run's files), else a number unique to this process."""
    for name in RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    # Lightning's own variables: process LOCAL_RANK on machine NODE_RANK
    if "LOCAL_RANK" in os.environ or "NODE_RANK" in os.environ:
        node, local = int(os.environ.get("NODE_RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        return local + node * int(os.environ.get("WORLD_SIZE", "1"))  # machine 0's process 0 alone is 0
    return 0


def started_by_lightning() -> bool:
    """Whether Lightning's launcher started this process as a rank > 0 (so rank 0's preflight has passed)."""
    # Lightning starts the other ranks only once rank 0 is in Trainer.fit, after its preflight
    launched = int(os.environ.get("LOCAL_RANK", "0")) > 0  # it starts the other processes of its machine only
    return launched and not any(name in os.environ for name in RANK_VARIABLES)


#: where torchrun and SLURM count a job's restarts
RESTART_VARIABLES = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


def restarted() -> bool:
    """Whether a launcher started this job again after it stopped (torchrun's --max-restarts, SLURM's requeue)."""
    # such a job continues from its own run dir's last checkpoint, whatever ckpt_path its command gives
    return any(int(os.environ.get(name, "0") or 0) > 0 for name in RESTART_VARIABLES)


#: what torchrun sets in every process it starts (Lightning's TorchElasticEnvironment looks for the same)
TORCHRUN = ("GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")


def under_torchrun() -> tuple[int, int] | None:
    """(its processes on this machine, its processes in all) where torchrun started this process, else None."""
    if not all(name in os.environ for name in TORCHRUN):
        return None
    return int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["WORLD_SIZE"])
