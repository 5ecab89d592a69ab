"""The project's layout: parts a fork may delete take nothing else with them.

The probes are one such part (src/harness/probes/, conf/probes/, their tests in tests/probes/): the config names
their group as optional, harness.tasks.training builds them through the config's `_target_` alone, and no other module
or test imports them at module level. A copy of the project without them trains to PASS and its test suite
still collects, and its tests run where they no longer reach for the probes."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command

#: what a fork deletes to drop the probes
PROBES = ("src/harness/probes", "conf/probes", "tests/probes")


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
    quick = "tests/project/test_contracts.py::test_fork_model_plugs_in_by_target"
    probe_reader = "tests/project/test_guides.py::test_own_probe_runs_in_every_run_through_probes_extra"
    ran = run_command(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", quick, probe_reader, cwd=fork, env=env
    )
    assert ran.returncode == 0 and "1 passed, 1 skipped" in ran.stdout, (
        ran.stdout[-3000:] + ran.stderr[-3000:]
    )


# ---------------------------------------------------------------------------------------------------------
# the house: folders in layers, small files and functions, a true map of each folder
# ---------------------------------------------------------------------------------------------------------

PACKAGE = ROOT / "src" / "harness"
STAGES = ("cli", "config", "data", "models", "ops", "checks", "train", "probes", "report")


def test_the_package_root_is_folders_by_stage_and_a_few_shared_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 6, modules
    assert all((PACKAGE / stage / "__init__.py").is_file() for stage in STAGES)
    assert not (PACKAGE / "bench").exists() and (ROOT / "benchmarks" / "__main__.py").is_file()


#: a folder a person can hold: at most this many modules (its __init__.py and __main__.py aside), subfolders apart
FOLDER_MODULES = 12
#: a file a person can read in one sitting, in the package and in the tests alike
FILE_LINES = 400


def test_no_file_over_400_lines_and_no_function_over_60():
    too_long = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        text = path.read_text()
        if len(text.splitlines()) > FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        if not path.is_relative_to(PACKAGE):
            continue
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 60
            ):
                too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not too_long, too_long


def crowded_folders(root: Path) -> list[str]:
    """The folders under `root` (itself included) that hold more than FOLDER_MODULES modules."""
    crowded = []
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = [
            p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py", "conftest.py")
        ]
        if len(modules) > FOLDER_MODULES:
            crowded.append(f"{folder}: {len(modules)} modules")
    return crowded


def test_no_folder_holds_more_modules_than_a_person_can_hold():
    crowded = (
        crowded_folders(PACKAGE) + crowded_folders(ROOT / "tests") + crowded_folders(ROOT / "benchmarks")
    )
    assert not crowded, crowded


def test_the_folder_rule_sees_a_crowded_folder(tmp_path):
    """Planted: a folder of 13 modules beside one of 12."""
    for folder, count in (("crowded", FOLDER_MODULES + 1), ("held", FOLDER_MODULES)):
        (tmp_path / folder).mkdir()
        for i in range(count):
            (tmp_path / folder / f"m{i}.py").write_text("")
        (tmp_path / folder / "__init__.py").write_text("")
    assert crowded_folders(tmp_path) == [f"{tmp_path / 'crowded'}: {FOLDER_MODULES + 1} modules"]


#: the layers of the package, lowest first (harness/__init__.py writes them down, docs/layout.md draws them): a
#: module imports only from its own layer or those below it, inside functions too
LAYERS = (
    ("errors", "seeding", "ranks", "signals", "compat"),
    ("config", "report"),
    ("data", "ops"),
    ("models", "train"),
    ("checks", "probes"),
    ("tasks",),
    ("cli",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def harness_imports(path: Path) -> list[tuple[str, int]]:
    """Every module of the package `path` imports (at the top, inside a function or in a command's entry block; a
    name imported from a package counts as its module where one exists), with the line."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []

    def visit(node) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "harness")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + [base]
                ).strip(".")
            if base.split(".")[0] == "harness":
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    is_module = (PACKAGE.parent / full.replace(".", "/")).with_suffix(".py").is_file()
                    found.append(
                        (
                            full if is_module or (PACKAGE.parent / full.replace(".", "/")).is_dir() else base,
                            node.lineno,
                        )
                    )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else "errors"  # the package itself: the bottom
    return next(i for i, names in enumerate(LAYERS) if part in names)


def import_graph() -> dict[str, set[str]]:
    return {
        module_name(path): {m for m, _ in harness_imports(path)} - {module_name(path)}
        for path in PACKAGE.rglob("*.py")
    }


def test_no_import_runs_up_the_layers():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert folders | modules == {n for names in LAYERS for n in names}, (
        "every folder and root module has a layer"
    )
    up = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for path in PACKAGE.rglob("*.py")
        for imported, line in harness_imports(path)
        if layer_of(imported) > layer_of(module_name(path))
    ]
    assert not up, "imports up the layers:\n" + "\n".join(up)
    written = (PACKAGE / "__init__.py").read_text()
    places = [
        written.index(f"{n}/" if (PACKAGE / n).is_dir() else f"{n}.py") for names in LAYERS for n in names
    ]
    assert places == sorted(places), "harness/__init__.py lists the layers in the order tested here"


def test_no_import_circle():
    graph = import_graph()
    circles, index, low, stack, order = [], {}, {}, [], iter(range(10**6))

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = next(order)
        stack.append(module)
        for other in graph.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert not circles, circles


def test_the_layer_test_sees_an_import_up_and_a_circle(tmp_path, monkeypatch):
    """Planted: a data module that imports the tasks inside a function, and two that import each other."""
    fake = tmp_path / "harness"
    for name in ("data", "tasks"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("")
    (fake / "data" / "a.py").write_text("def f():\n    from harness.tasks import b\n")
    (fake / "tasks" / "b.py").write_text("from harness.tasks.c import x\n")
    (fake / "tasks" / "c.py").write_text("import harness.tasks.b\nx = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert [(m, line) for m, line in harness_imports(fake / "data" / "a.py")] == [("harness.tasks.b", 2)]
    assert layer_of("harness.data.a") < layer_of("harness.tasks.b")
    with pytest.raises(AssertionError, match="harness.tasks.b"):
        test_no_import_circle()


def test_every_package_docstring_maps_its_folder():
    """Each folder's opening docstring names every module in it, and names no module that is not there."""
    wrong = []
    for init in [PACKAGE / "__init__.py", *PACKAGE.glob("**/__init__.py")]:
        folder, doc = init.parent, ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(r"(?<![\w/.])(\w+)\.py\b", doc))
        here = {p.stem for p in folder.glob("*.py")} - {"__init__", "__main__"}
        here |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        mentioned = named | set(re.findall(r"(\w+)/", doc))
        missing = sorted(here - mentioned)
        absent = sorted(n for n in named if not (folder / f"{n}.py").is_file() and n not in ("train", "eval"))
        if missing or absent:
            wrong.append(f"{init.relative_to(ROOT)}: not named {missing}, named but absent {absent}")
    assert not wrong, "\n".join(wrong)


def test_the_entry_reaches_trainer_fit_in_four_calls(tmp_path, data_root):
    """main -> the job -> the task -> fit -> Trainer.fit, each a step of the story, read from a real run's stack."""
    stack = tmp_path / "stack.txt"
    command = [
        "train.py",
        "n=1",
        "mode.max_steps=1",
        "preflight=false",
        "probes=off",
        f"data.root={data_root}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "+callbacks.stack._target_=tests.forks.models.StackAtFit",
    ]
    env = {"PYTHONPATH": str(ROOT), "STACK_FILE": str(stack)}
    result = run_command(sys.executable, str(ROOT / command[0]), *command[1:], cwd=tmp_path, env=env)
    assert stack.is_file(), result.stderr[-3000:]
    # Hydra's and Lightning's frames, and this callback's, are not the harness's: what is left is the story
    frames = stack.read_text().split()
    assert frames == ["cli.__init__.main", "tasks.job.job", "tasks.training.train", "tasks.training.fit"], (
        frames
    )


def test_no_machinery_for_module_names_the_layout_no_longer_has():
    """A template is copied, not depended on: no import hook maps earlier names, and no page keeps their tables."""
    import harness  # noqa: F401  (what it would install, it installs as it imports)
    import harness.probes.assemble as assemble

    hooks = [type(f).__module__ for f in sys.meta_path if type(f).__module__.startswith("harness")]
    assert hooks == [], hooks
    pages = [p for p in (ROOT / "docs").glob("*.md") if "earlier layout" in p.read_text().lower()]
    assert pages == [], pages
    assert not hasattr(assemble, "ALIASES")


def test_preparing_a_corpus_imports_neither_torch_nor_lightning(tmp_path):
    """The preparer runs where a GPU job's data is made ready (a login node): it tokenizes, nothing more."""
    (tmp_path / "a.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    probe = (
        "import runpy, sys; sys.argv = ['prepare', 'data=corpus', 'tokenizer=char', f'data.files={sys.argv[1]}', "
        "f'data.root={sys.argv[2]}', 'data.length=16', 'data.workers=1'];\n"
        "try:\n    runpy.run_module('harness.cli.prepare', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('heavy:', sorted(m for m in ('torch', 'pytorch_lightning', 'lightning') if m in sys.modules))"
    )
    result = run_command(
        sys.executable, "-c", probe, str(tmp_path / "a.txt"), str(tmp_path / "data"), cwd=tmp_path
    )
    assert "heavy: []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert list((tmp_path / "data" / "corpus").rglob("meta.json")), result.stderr[-2000:]
