"""Habits a fork inherits: the commit hooks are configured and pinned, and gpu tests skip without a GPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_pre_commit_hooks_are_configured_and_pinned():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"] for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff", "ruff-format", "trailing-whitespace", "end-of-file-fixer", "check-yaml"} <= hooks, hooks
    for repo in config["repos"]:  # a branch name would change the hooks under everyone's feet
        assert re.fullmatch(r"v\d+\.\d+\.\d+", repo["rev"]), (
            f"{repo['repo']}: rev {repo['rev']!r} is not a release"
        )


@pytest.mark.gpu
def test_gpu_marked_tests_run_only_where_cuda_is():
    """Skipped by tests/conftest.py where no CUDA device is visible; fails if that hook stops skipping."""
    assert torch.cuda.is_available()
