"""Minimal, runnable examples of each extension point of the template (docs/extending.md).

Importable from the repository root, where `python train.py` runs (Python puts the script's folder first
on sys.path) and where pytest runs. tests/project/test_guides.py runs every one of them."""
