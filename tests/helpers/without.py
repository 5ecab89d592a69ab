"""Run a script as if some packages were not installed:
`python tests/helpers/without.py transformers,wandb -- train.py ...`.

Each named module is blocked (None in sys.modules: Python's own way to make an import fail), as in an install
without the extra that brings it; then the script runs as __main__ with the arguments after `--`."""

import runpy
import sys

if __name__ == "__main__":
    hidden, script, *argv = sys.argv[1].split(","), sys.argv[3], *sys.argv[4:]
    for name in hidden:
        sys.modules[name] = None
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")
