"""The project's layout: parts a fork may delete take nothing else with them.

The probes are one such part (src/harness/probes/, conf/probes/, their tests test_probes.py and test_probe_plumbing.py): the config names
their group as optional, harness.train.run builds them through the config's `_target_` alone, and no other module
or test imports them at module level. A copy of the project without them trains to PASS and its test suite
still collects, and its tests run where they no longer reach for the probes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command

#: what a fork deletes to drop the probes
PROBES = ("src/harness/probes", "conf/probes", "tests/test_probes.py", "tests/test_probe_plumbing.py")


def project_copy(destination: Path, without: tuple[str, ...]) -> Path:
    """The project's files as git sees them (tracked, and untracked ones it does not ignore) copied to
    `destination`, less the paths `without`."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not any(name == w or name.startswith(f"{w}/") for w in without):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.mark.slow  # ~25 s: a train.py run and a collection of the whole suite, each in a fresh interpreter
def test_a_fork_without_the_probes_trains_and_collects(tmp_path, data_root):
    fork = project_copy(tmp_path / "fork", without=PROBES)
    assert not (fork / "src" / "harness" / "probes").exists() and (fork / "train.py").is_file()
    env = {"PYTHONPATH": str(fork / "src")}  # the copy's package, not the one installed from this checkout
    where = run_command(sys.executable, "-c", "import harness; print(harness.__file__)", cwd=fork, env=env)
    assert Path(where.stdout.strip()).is_relative_to(fork), where.stdout + where.stderr

    run_dir = tmp_path / "run"
    command = ["train.py", "mode=overfit", "n=1", "data.length=8", f"data.root={data_root}"]
    result = run_command(sys.executable, *command, f"hydra.run.dir={run_dir}", cwd=fork, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["status"] == "PASS", verdict
    probe_items = {"dead_params", "grad_by_position", "reach_init", "reach_final", "inputs_identical"}
    assert not probe_items & set(verdict), verdict
    assert not list(run_dir.glob("*.png")) and not (run_dir / "datapoints.jsonl").exists()

    collected = run_command(sys.executable, "-m", "pytest", "--collect-only", "-q", cwd=fork, env=env)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "error" not in collected.stdout.lower().splitlines()[-1], collected.stdout[-3000:]
    # a test that switches the probes off for speed runs as it is; one that reads their outputs is skipped
    quick = "tests/test_contracts.py::test_fork_model_plugs_in_by_target"
    probe_reader = "tests/test_guides.py::test_own_probe_runs_in_every_run_through_probes_extra"
    ran = run_command(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", quick, probe_reader, cwd=fork, env=env
    )
    assert ran.returncode == 0 and "1 passed, 1 skipped" in ran.stdout, (
        ran.stdout[-3000:] + ran.stderr[-3000:]
    )


# ---------------------------------------------------------------------------------------------------------
# the house: folders by pipeline stage, small files and functions, old names still importing
# ---------------------------------------------------------------------------------------------------------

PACKAGE = ROOT / "src" / "harness"
STAGES = ("cli", "config", "data", "models", "ops", "checks", "train", "probes", "report")


def test_the_package_root_is_folders_by_stage_and_a_few_shared_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 6, modules
    assert all((PACKAGE / stage / "__init__.py").is_file() for stage in STAGES)
    assert not (PACKAGE / "bench").exists() and (ROOT / "benchmarks" / "__main__.py").is_file()


def test_no_file_over_400_lines_and_no_function_over_60():
    import ast

    too_long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if len(text.splitlines()) > 400:
            too_long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 60
            ):
                too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not too_long, too_long


def test_every_old_module_name_still_imports_as_its_new_module():
    import importlib

    import harness

    for old, new in harness.RENAMED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from harness.run import run  # the names the docs gave: still there
    from harness.twins import MaskedCrossEntropy, Twin  # noqa: F401

    assert run is importlib.import_module("harness.train.run").run


def test_preparing_a_corpus_imports_neither_torch_nor_lightning(tmp_path):
    """The preparer runs where a GPU job's data is made ready (a login node): it tokenizes, nothing more."""
    (tmp_path / "a.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    probe = (
        "import runpy, sys; sys.argv = ['prepare', 'data=corpus', 'tokenizer=char', f'data.files={sys.argv[1]}', "
        "f'data.root={sys.argv[2]}', 'data.length=16', 'data.workers=1'];\n"
        "try:\n    runpy.run_module('harness.data.prepare', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('heavy:', sorted(m for m in ('torch', 'pytorch_lightning', 'lightning') if m in sys.modules))"
    )
    result = run_command(
        sys.executable, "-c", probe, str(tmp_path / "a.txt"), str(tmp_path / "data"), cwd=tmp_path
    )
    assert "heavy: []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert list((tmp_path / "data" / "corpus").rglob("meta.json")), result.stderr[-2000:]
