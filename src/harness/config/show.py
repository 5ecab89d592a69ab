"""The composed config as a tree, drawn with Rich: whole in the run dir (config_tree.log), one line a group on the
console at the start of a run (harness.tasks.training.run calls show_config, on rank 0).

The console gets the short form because a run's first screen is for the preflight and the verdict; the file
has every key, resolved (interpolations and environment variables filled in), as the run used it.
`.hydra/config.yaml` beside it is the same config unresolved, as YAML."""

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
    """Write `run_dir/config_tree.log` (the whole tree) and, when `console`, log the short one. Returns the file."""
    plain = resolved(cfg)
    choices = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    path = Path(run_dir) / "config_tree.log"
    path.write_text(render(_whole_tree(plain, choices)))
    if console:
        log.info("config (every key: %s)\n%s", path, render(_short_tree(plain, choices)).rstrip())
    return path


def resolved(cfg: DictConfig) -> dict:
    """The config as plain containers, interpolations resolved; Hydra's own node (in a test's config) left out."""
    return {
        key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
        for key in cfg
        if key != "hydra"
    }


def label(key: str, choices: dict) -> str:
    """`key`, with the group option it came from when it is a group: `model: transformer`."""
    choice = choices.get(key)
    return f"{key}: {choice}" if isinstance(choice, str) else key


def _whole_tree(plain: dict, choices: dict) -> Tree:
    """Every key: a branch a node, a leaf a value."""
    tree = Tree("config")

    def grow(branch: Tree, node: dict) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                grow(branch.add(label(key, choices) if branch is tree else str(key)), value)
            else:
                branch.add(f"{key}: {value}")

    grow(tree, plain)
    return tree


def _short_tree(plain: dict, choices: dict) -> Tree:
    """One line for the top-level values, then one line a group: its option and its own values (a nested node
    as `name{…}`), cut at the width."""
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
        tree.add(Text(f"{label(key, choices)}  {inner}", no_wrap=True, overflow="ellipsis"))
    return tree


def render(tree: Tree) -> str:
    """`tree` as plain text (no colour codes): for a log file and for the logging handlers."""
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None, force_terminal=False, soft_wrap=False).print(tree)
    return out.getvalue()
