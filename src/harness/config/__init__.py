"""The config: its schema (schema.py), its rules (rules.py: `validate`, the one entry), a node built with one-line
errors (build.py: `build`), a Hydra error in one line (explain.py), and the config drawn as a tree (tree.py).

Nothing here imports torch: the command line validates every job's config before the heavy imports."""

from harness.config.build import build
from harness.config.rules import validate

__all__ = ["build", "validate"]
