"""What the symptom tests share: a quick in-process run of the real config, and the symptoms its verdict names."""

from __future__ import annotations

from pathlib import Path

from harness.tasks.training import run
from tests.conftest import compose_config

QUICK = ["preflight=false", "probes.plots=false", "probes.datapoints=null", "probes.embeddings=null"]


def _run(tmp_path_factory, data_root, name: str, *overrides: str) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp(name)
    return run_dir, run(compose_config([*QUICK, *overrides], run_dir, data_root))


def found(verdict: dict, name: str) -> list[dict]:
    return [s for s in verdict["symptoms"] if s["name"] == name]


def names(verdict: dict) -> set[str]:
    return {s["name"] for s in verdict["symptoms"]}
