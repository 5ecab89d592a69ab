"""What an install holds: a core that runs the default job, and extras for the rest, each option whose extra is
missing refused at the door in one line that names it. A missing package is made so in a subprocess
(tests/helpers/without.py blocks its import), as in an install without its extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys

import pytest
import tomllib

from harness.config.extras import EXTRAS
from tests.conftest import ROOT, run_command

#: an option of each extra, and the module whose absence it must be refused for
OPTIONS = {
    "hf": (["model=hf"], "transformers"),
    "datasets": (["data=hf", "data.path=train.parquet"], "datasets"),
    "wandb": (["logger=wandb"], "wandb"),
    "tensorboard": (["logger=tensorboard"], "tensorboard"),
    "mlflow": (["logger=mlflow"], "sqlalchemy"),
    "search": (["experiment=search"], "hydra_plugins.hydra_optuna_sweeper"),
    "slurm": (["-m", "hydra/launcher=slurm"], "hydra_plugins.hydra_submitit_launcher"),
    "parallel": (["-m", "hydra/launcher=parallel"], "hydra_plugins.hydra_joblib_launcher"),
}


def train_without(modules: list[str], *args: str, cwd) -> object:
    command = [
        sys.executable,
        str(ROOT / "tests" / "helpers" / "without.py"),
        ",".join(modules),
        "--",
        str(ROOT / "train.py"),
    ]
    return run_command(*command, *args, f"hydra.run.dir={cwd}/run", f"hydra.sweep.dir={cwd}/sweep", cwd=cwd)


def test_every_extra_has_an_option_tested_and_a_pyproject_entry():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(OPTIONS) == set(EXTRAS) and set(EXTRAS) <= set(declared)


@pytest.mark.parametrize("extra", sorted(OPTIONS))
def test_an_option_whose_extra_is_missing_is_refused_in_one_line(extra, tmp_path):
    args, module = OPTIONS[extra]
    result = train_without([module], *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"needs the {extra} extra" in lines[0], (
        lines
    )
    assert f"pip install -e '.[{extra}]'" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.slow  # a whole overfit run, ~10 s
def test_the_default_job_runs_without_any_extra(tmp_path):
    """The trackers, the search and launch plugins blocked: `make train`'s job still PASSes. (transformers stays:
    torchmetrics, which Lightning imports, imports it wherever its distribution is installed.)"""
    optional = [m for extra, modules in EXTRAS.items() if extra != "hf" for m in modules]
    result = train_without(optional, "n=1", "data.length=8", cwd=tmp_path)
    assert result.returncode == 0 and "PASS: " in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Error importing" not in result.stdout + result.stderr  # Hydra scans every plugin, the absent too


def distribution_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_every_module_the_package_imports_is_declared():
    """A third-party import of src/ belongs to a distribution pyproject.toml names (core or an extra), or to one
    of theirs (lightning_fabric comes with pytorch-lightning)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = distribution_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= distribution_names(extra)
    declared |= {"lightning-fabric", "lightning", "tensorboard", "hydra-core"}
    providers = importlib.metadata.packages_distributions()
    imported = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            )
            imported |= {n.split(".")[0] for n in names}
    third_party = imported - set(sys.stdlib_module_names) - {"harness"}
    undeclared = {
        m: providers.get(m) for m in third_party if not {d.lower() for d in providers.get(m, [m])} & declared
    }
    assert not undeclared, undeclared
