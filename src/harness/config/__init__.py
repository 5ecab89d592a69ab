"""The config: its schema, a node built with one-line errors, a Hydra error in one line, the config drawn.

    schema.py    a typed config per mode, registered as Hydra starts (hydra_plugins.harness_schema) before any
                 composition: conf/train.yaml's defaults start from it
    build.py     `build`: a node instantiated, a library's refusal named by its key
    explain.py   a Hydra error (an unknown key, a missing option) in one line
    extras.py    the launcher's and sweeper's extras, checked before a job is queued
    show.py      the config tree on the console and in config_tree.log

Nothing here imports torch: the command line validates every job's config before the heavy imports. The rules
across parts, and the trial build, are the tasks' (harness.tasks.validate, harness.tasks.try_build)."""

from harness.config.build import build

__all__ = ["build"]
