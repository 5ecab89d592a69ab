"""`show_config`: the composed config drawn as a tree with Rich, every key resolved in the run dir's
config_tree.log, one line a group on the console (.hydra/config.yaml beside it is the config unresolved)."""

# the console gets the short form: a run's first screen is for the preflight and the verdict

from __future__ import annotations

import io
import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

log = logging.getLogger(__name__)

#: characters a line of the drawn tree may take: the file's, and the console's short form (cut with …)
WIDTH = 110


def show_config(cfg: DictConfig, run_dir: Path, console: bool = True) -> Path:
    """Write `run_dir/config_tree.log` (every key) and, when `console`, log the short tree. Returns the file."""
    plain = _resolved_config(cfg)
    choices = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    path = Path(run_dir) / "config_tree.log"
    path.write_text(_plain_text(_full_tree(plain, choices)))
    if console:
        log.info("config (every key: %s)\n%s", path, _plain_text(_short_tree(plain, choices)).rstrip())
    return path


def _resolved_config(cfg: DictConfig) -> dict:
    """The config as plain containers, interpolations resolved, Hydra's own node left out."""
    return {
        key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
        for key in cfg
        if key != "hydra"
    }


def _group_label(key: str, choices: dict) -> str:
    """`key`, with the group option it came from when it is a group: `model: transformer`."""
    choice = choices.get(key)
    return f"{key}: {choice}" if isinstance(choice, str) else key


def _full_tree(plain: dict, choices: dict) -> Tree:
    """Every key: a branch a node, a leaf a value."""
    tree = Tree("config")

    def grow(branch: Tree, node: dict) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                grow(branch.add(_group_label(key, choices) if branch is tree else str(key)), value)
            else:
                branch.add(f"{key}: {value}")

    grow(tree, plain)
    return tree


def _short_tree(plain: dict, choices: dict) -> Tree:
    """One line for the top-level values, then one a group: its option and values (a nested node as `name{…}`)."""
    tree = Tree("config")
    tops = [f"{k}={v}" for k, v in plain.items() if not isinstance(v, dict)]
    tree.add(Text(" ".join(tops), no_wrap=True, overflow="ellipsis"))
    for key, value in plain.items():
        if not isinstance(value, dict):
            continue
        inner = " ".join(
            f"{k}{{…}}" if isinstance(v, dict) else f"{k}={v}"
            for k, v in value.items()
            if k not in ("_target_", "_recursive_", "_partial_")
        )
        tree.add(Text(f"{_group_label(key, choices)}  {inner}", no_wrap=True, overflow="ellipsis"))
    return tree


def _plain_text(tree: Tree) -> str:
    """`tree` as text without colour codes."""
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None, force_terminal=False, soft_wrap=False).print(tree)
    return out.getvalue()
