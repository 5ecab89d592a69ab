"""The config, without torch: its schema, a node built with one-line errors, Hydra's errors explained, the tree.

    schema.py    the typed config, registered as Hydra starts
    build.py     `build`: a node instantiated, a refusal named by its key
    explain.py   a Hydra error in one line
    extras.py    the extras an option needs, checked at the door
    show.py      the config tree on the console and in config_tree.log

The rules across parts and the trial build are harness.tasks.validate and harness.tasks.try_build."""

from harness.config.build import build

__all__ = ["build"]
