"""Which rank this process is, known before the Trainer exists: from torchrun's, SLURM's or Lightning's
variables (docs/scaling.md). Rank 0 alone writes the run's files."""

from __future__ import annotations

import os

#: where torchrun and SLURM put the global rank
RANK_VARIABLES = ("RANK", "SLURM_PROCID")


def global_rank() -> int:
    """0 for the run's first process (the one that writes), a positive number unique to the process for every
    other; known before the Trainer exists (0 when alone)."""
    for name in RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    # Lightning's own variables: process LOCAL_RANK on machine NODE_RANK
    if "LOCAL_RANK" in os.environ or "NODE_RANK" in os.environ:
        node, local = int(os.environ.get("NODE_RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        return local + node * int(os.environ.get("WORLD_SIZE", "1"))  # machine 0's process 0 alone is 0
    return 0


def started_by_lightning() -> bool:
    """Whether Lightning's launcher started this process as a rank > 0: it does so only once rank 0 is in
    `Trainer.fit`, that is after rank 0's preflight passed, so this rank need not run it again."""
    launched = int(os.environ.get("LOCAL_RANK", "0")) > 0  # it starts the other processes of its machine only
    return launched and not any(name in os.environ for name in RANK_VARIABLES)


#: where torchrun and SLURM count a job's restarts
RESTART_VARIABLES = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


def restarted() -> bool:
    """Whether a launcher started this job again after it stopped: torchrun's restarts (--max-restarts), SLURM's
    requeues. Such a job continues from its own run dir's last checkpoint, whatever ckpt_path its command gives."""
    return any(int(os.environ.get(name, "0") or 0) > 0 for name in RESTART_VARIABLES)


#: what torchrun sets in every process it starts (Lightning's TorchElasticEnvironment looks for the same)
TORCHRUN = ("GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")


def under_torchrun() -> tuple[int, int] | None:
    """(its processes on this machine, its processes in all) where torchrun started this process, else None."""
    if not all(name in os.environ for name in TORCHRUN):
        return None
    return int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["WORLD_SIZE"])
