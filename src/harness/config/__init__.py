"""The config, without torch: its schema, a node built with one-line errors, Hydra's errors explained, the tree.

    declare.py   `key`: a key's type, default, range and doc declared once; `check_declared`
    schema.py    harness's own keys and the modes, registered as Hydra starts
    groups/      every config group's options, declared once
    build.py     `build`: a node instantiated, a refusal named by its key
    explain.py   a Hydra error in one line
    extras.py    the extras an option needs, checked at the door
    show.py      the config tree on the console and in config_tree.log

The rules across parts and the targets' check are harness.tasks.validate and harness.tasks.targets."""

from harness.config.build import build

__all__ = ["build"]
