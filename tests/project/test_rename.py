"""`make rename NAME=...` on a copy of the project: no reference to the old package is left, the copy's
own tests pass importing `mylab`, and train.py passes its overfit run there.

The old package stays installed in this environment, so the copy runs with an old package that refuses to
import: a reference the rename missed fails loudly instead of quietly loading the original."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import PROBES_OFF
from tests.conftest import run_command as run

ROOT = Path(__file__).resolve().parents[2]
# read, not written out: after a rename this file must test renaming the new name
OLD = next(p.parent.name for p in sorted((ROOT / "src").glob("*/__init__.py")))
NEW = "mylab" if OLD != "mylab" else "mylab2"

#: what a leftover reference to the package looks like (prose such as "a sound harness" may stay)
REFERENCES = re.compile(
    rf"(?<![\w.]){OLD}\.[A-Za-z_\"']|\b(import|from)\s+{OLD}\b|(?<![\w.-]){OLD}/|[\"']{OLD}[\"'-]"
    rf"|^\s*(#+|\"\"\")?\s*{OLD}(:|\s*$)|:\s+{OLD}\s*(#|$)|\b{OLD.upper()}_[A-Z]",
    re.MULTILINE,
)


def rename_script():
    """scripts/rename.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("rename", ROOT / "scripts" / "rename.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    """A copy of the project (tracked and new files), renamed to mylab with scripts/rename.py."""
    copy = tmp_path_factory.mktemp("fork") / "project"
    for path in rename_script().project_files(ROOT):  # the files the rename itself would rewrite
        name = path.relative_to(ROOT)
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy / name)
    done = run(sys.executable, "scripts/rename.py", NEW, cwd=copy)
    assert done.returncode == 0, done.stderr
    return copy


@pytest.fixture(scope="module")
def fork_env(renamed, tmp_path_factory) -> dict:
    """PYTHONPATH: the copy's src first, and a package of the old name that fails on import."""
    guard = tmp_path_factory.mktemp("guard")
    (guard / OLD).mkdir()
    (guard / OLD / "__init__.py").write_text(
        f"raise ImportError('the renamed copy imported {OLD}: a reference was missed')\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(renamed / "src"), str(guard)])}


def test_no_reference_to_the_old_name_is_left(renamed):
    assert not (renamed / "src" / OLD).exists() and (renamed / "src" / NEW / "__init__.py").is_file()
    leftovers = []
    for path in sorted(p for p in renamed.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        leftovers += [f"{path.relative_to(renamed)}: {m.group(0)!r}" for m in REFERENCES.finditer(text)]
    assert not leftovers, "\n".join(leftovers[:20])
    assert f'name = "{NEW}"' in (renamed / "pyproject.toml").read_text()
    assert (
        f'_target_: str = "{NEW}.models.RNN"'
        in (renamed / "src" / NEW / "config" / "groups" / "model.py").read_text()
    )
    assert f"-m {NEW}.cli.prepare" in (renamed / "docs" / "configuration.md").read_text()


def test_references_are_renamed_and_prose_is_kept():
    script = rename_script()
    before = (
        f'import {OLD}\nfrom {OLD}.run import run  # log "{OLD}.twins", "{OLD}"\n# {OLD}: a title\n'
        f"_target_: {OLD}.models.RNN  # see src/{OLD}/models/\nproject: {OLD}  # wandb\n{OLD.upper()}_DEBUG=1\n"
        f"a sound {OLD} passes; the {OLD}'s format; {OLD.capitalize()}Module; {OLD}_step; the {OLD}.\n"
    )
    after = (
        f'import {NEW}\nfrom {NEW}.run import run  # log "{NEW}.twins", "{NEW}"\n# {NEW}: a title\n'
        f"_target_: {NEW}.models.RNN  # see src/{NEW}/models/\nproject: {NEW}  # wandb\n{NEW.upper()}_DEBUG=1\n"
        f"a sound {OLD} passes; the {OLD}'s format; {OLD.capitalize()}Module; {OLD}_step; the {OLD}.\n"
    )
    assert script.rewrite(before, OLD, NEW) == after


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("My-Lab", "not a valid lowercase Python identifier"),
        ("class", "not a valid lowercase Python identifier"),
        (NEW, "already called"),
        ("tests", "already exists"),
        ("torch", "already the name of a module"),
    ],
)
def test_bad_names_are_refused_in_one_line(renamed, name, says):
    before = sorted(p.name for p in (renamed / "src").iterdir())
    done = run(sys.executable, "scripts/rename.py", name, cwd=renamed)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert sorted(p.name for p in (renamed / "src").iterdir()) == before, "a refused name changed nothing"


def test_make_target_refuses_a_bad_name(renamed):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = run("make", "--no-print-directory", "rename", "NAME=9lives", cwd=renamed)
    assert done.returncode != 0 and "error: NAME='9lives'" in done.stderr, done.stderr


@pytest.mark.slow  # the copy's own tests and a train.py run: about 30 s on 2 cores
def test_renamed_copy_passes_its_tests_and_trains(renamed, fork_env, tmp_path):
    tests = run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-m",
        "not slow",
        "tests/project/test_contracts.py",
        "tests/project/test_guides.py",
        "-k",
        "not through_train_py and not renamed",
        cwd=renamed,
        env=fork_env,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    trained = run(
        sys.executable,
        "train.py",
        "mode=overfit",
        "n=1",
        *PROBES_OFF,
        f"data.root={tmp_path / 'data'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=renamed,
        env=fork_env,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "PASS" and verdict["checks"], verdict
    assert f"[{NEW}.tasks.training]" in trained.stdout + trained.stderr, "the log names the renamed package"
