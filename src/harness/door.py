"""Checks at the door that the schema's types cannot make: the type of a value under a group a fork owns (typed
`Any` in harness/schema.py), the ranges of the built-in groups' keys, wandb online without a key or a network,
and a run directory that already holds another run.

Each refuses in one line (harness.errors.ConfigError) before any data or preflight work: a mistake found after
the data is built and the checks have run costs seconds to minutes, and a traceback says nothing useful."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.errors import ConfigError

#: what a value's kind is called in a one-line error
KIND_WORDS = {
    "number": "a number",
    "bool": "true or false",
    "str": "text",
    "list": "a list",
    "dict": "a mapping",
}

#: keys whose default is a number but that take other kinds too (Lightning's devices: "auto", "0,1", [0, 1])
ALSO = {"trainer.devices": ("str", "list")}


def kind(value) -> str | None:
    """The kind of a config value as a user writes it: number, bool, str, list, dict (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, ListConfig)):
        return "list"
    if isinstance(value, (dict, DictConfig)):
        return "dict"
    return "str"


def check_types(cfg: DictConfig, base: DictConfig, keys: list[str]) -> None:
    """Each of `keys` (the dotted keys the command line set) holds a value of the kind the config file gives it
    (`base`: composed with the same group choices, without the values): `optim.lr=abc` where adamw.yaml has
    3e-3 is refused now, not by the optimizer after the data and the preflight. Keys Hydra's schema types
    (harness/schema.py) are refused by Hydra already; null and a key the files do not hold pass."""
    for key in keys:
        default = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
        given = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        wanted, got = kind(default), kind(given)
        if wanted not in ("number", "bool") or got is None or got == wanted:
            continue
        if got in ALSO.get(key, ()):
            continue
        raise ConfigError(
            key,
            given,
            f"{key} must be {KIND_WORDS[wanted]}, not {given!r} (the config has {key}={default}); "
            "text that looks like a number needs no quotes",
        )


#: harness's own keys with a range: key -> (smallest, whole number?, why). Checked wherever the key is set.
RANGES = {
    "optim.lr": (0.0, False, "the peak learning rate, 0: no learning (try optim.lr=3e-3)"),
    "optim.weight_decay": (0.0, False, "must be >= 0 (try optim.weight_decay=0.0)"),
    "optim.momentum": (0.0, False, "must be >= 0 (try optim.momentum=0.9)"),
    "model.d_model": (1, True, "the model's width (try model.d_model=64)"),
    "model.layers": (1, True, "blocks or recurrent layers (try model.layers=2)"),
    "model.heads": (1, True, "attention heads (try model.heads=4)"),
    "model.max_len": (1, True, "positions the model can embed (try model.max_len=${data.length})"),
    "data.batch_size": (1, True, "examples a batch (try data.batch_size=32)"),
    "data.size": (1, True, "training examples (try data.size=1000)"),
    "data.val_size": (1, True, "validation examples (try data.val_size=100)"),
    "data.num_workers": (0, True, "DataLoader worker processes, 0: none (try data.num_workers=0)"),
    "trainer.num_nodes": (1, True, "machines (try trainer.num_nodes=1)"),
    "trainer.gradient_clip_val": (0.0, False, "must be >= 0, or null for no clipping (try 1.0)"),
    "mode.val_every": (1, True, "steps between validations (try mode.val_every=100)"),
    "mode.log_every": (1, True, "steps between logged rows (try mode.log_every=1)"),
    "mode.ckpt_every": (0, True, "steps between periodic checkpoints (try mode.ckpt_every=100)"),
}


def check_ranges(cfg: DictConfig) -> None:
    """Each key of RANGES that the config holds (and is not null) lies in its range."""
    for key, (low, whole, why) in RANGES.items():
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if value is None or (isinstance(value, str) and value.startswith("${")):
            continue
        if kind(value) != "number" or (whole and not float(value).is_integer()):
            noun = "a whole number" if whole else "a number"
            raise ConfigError(key, value, f"must be {noun}; {why}")
        if value < low:
            raise ConfigError(key, value, f"must be >= {low}; {why}")


#: logger.wandb.mode's choices (harness.loggers.wandb_logger sets WANDB_MODE from it)
WANDB_MODES = ("offline", "online", "disabled")
#: seconds to wait for wandb's server before refusing mode=online (wandb itself waits 90 s)
REACH_SECONDS = 5.0


def wandb_key(host: str) -> bool:
    """Whether wandb has an API key to log in to `host` with: WANDB_API_KEY, or an entry for the host in the netrc
    file (`wandb login` writes ~/.netrc, or $NETRC)."""
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (netrc.NetrcParseError, OSError):
        return False


def check_wandb(cfg: DictConfig) -> None:
    """logger.wandb.mode is a choice; `online` needs an API key and a reachable server, or wandb fails late (after
    the data and the preflight: "No API key configured", or a 90 s timeout then a traceback)."""
    node = (cfg.get("logger") or {}).get("wandb")
    if not isinstance(node, DictConfig):
        return
    mode = node.get("mode")
    if mode not in WANDB_MODES:
        raise ConfigError("logger.wandb.mode", mode, f"choose one of {', '.join(WANDB_MODES)}")
    if mode != "online":
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = url.hostname or "api.wandb.ai"
    fix = "or log offline with logger.wandb.mode=offline and upload later with `wandb sync <run dir>/wandb`"
    if not wandb_key(host):
        raise ConfigError(
            "logger.wandb.mode",
            mode,
            f"no wandb API key for {host} (neither WANDB_API_KEY nor a netrc entry); run `wandb login`, {fix}",
        )
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=REACH_SECONDS).close()
    except OSError as err:
        raise ConfigError(
            "logger.wandb.mode",
            mode,
            f"cannot reach {host}:{port} ({err.strerror or type(err).__name__}); check the network, {fix}",
        ) from None


def prior_status(run_dir: Path) -> str | None:
    """The status in `run_dir`/verdict.json (`?` when unreadable), or None where no run has ended there."""
    verdict = run_dir / "verdict.json"
    if not verdict.is_file():
        return None
    try:
        return str(json.loads(verdict.read_text(encoding="utf-8")).get("status", "?"))
    except (ValueError, UnicodeDecodeError, AttributeError):
        return "?"


class RunDirTaken(ConfigError):
    """The run directory holds an earlier run's verdict: refused, and nothing is written there (a sweep job's
    ERROR verdict would itself overwrite the earlier one)."""


def check_run_dir(cfg: DictConfig, run_dir: Path, key: str = "hydra.run.dir") -> None:
    """Refuse a run directory that holds an earlier run's verdict: this run would overwrite its metrics,
    checkpoints and verdict. Allowed: `+overwrite=true`; the same run resumed (ckpt_path inside it); a job started
    again in the dir it was interrupted in (verdict INTERRUPTED: a requeued SLURM job; in mode=full it continues
    from its own last.ckpt, harness.faults.interrupted_here)."""
    status = prior_status(Path(run_dir))
    if status in (None, "INTERRUPTED") or cfg.get("overwrite", False) is True:
        return
    run_dir = Path(run_dir).absolute()
    ckpt = cfg.get("ckpt_path")
    if ckpt not in (None, "last") and run_dir in Path(ckpt).absolute().parents:
        return
    raise RunDirTaken(
        key,
        str(run_dir),
        f"already holds a run (verdict {status}) that this one would overwrite; choose another folder, "
        "or give +overwrite=true (a mode=full run continues inside it with "
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'})",
    )


def check_sweep_dir(cfg: DictConfig, sweep_dir: Path) -> None:
    """Refuse a sweep directory any of whose job dirs holds a verdict, whatever its status: the new sweep would
    overwrite those jobs and their summary. Allowed: `+overwrite=true`."""
    if cfg.get("overwrite", False) is True or not Path(sweep_dir).is_dir():
        return
    held = next((d for d in sorted(Path(sweep_dir).iterdir()) if prior_status(d)), None)
    if held is not None:
        raise ConfigError(
            "hydra.sweep.dir",
            str(sweep_dir),
            f"already holds a sweep ({held.name}/verdict.json) that this one would overwrite; "
            "choose another folder, or give +overwrite=true",
        )


def check_flags(cfg: DictConfig) -> None:
    """The `+flag=true` switches the harness reads: true or false."""
    for name in ("overwrite", "resume_any_mode"):
        value = cfg.get(name, False)
        if not isinstance(value, bool):
            raise ConfigError(name, value, f"must be true or false (+{name}=true)")


def check_values(cfg: DictConfig) -> None:
    """What harness.config.validate asks of this module: the ranges, the +flags, the wandb tracker."""
    check_ranges(cfg)
    check_flags(cfg)
    check_wandb(cfg)
