"""A fork's module that fails as it imports is named by its own file and line first; a mistake found as the run
builds its parts leaves the run dir a CONFIG_ERROR verdict and a page, exit 2 (found at the door: no run dir)."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from harness.config.build import build
from harness.errors import ConfigError
from harness.report.verdict import read_verdict
from tests.conftest import PROBES_OFF, train

BROKEN = {  # a module of a fork -> (its text, the line the error leads with)
    "unclosed": (
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self, vocab_size):\n"
        "        super().__init__()\n        self.x = torch.nn.Linear(2, (3\n",
        "unclosed.py:7: SyntaxError: '(' was never closed",
    ),
    "undefined": (
        "import torch\n\nWIDTH = HEIGHT * 2\n",
        "undefined.py:3: NameError: name 'HEIGHT' is not defined",
    ),
    "needs_a_package": (
        "import os\nimport no_such_package_here\n",
        "needs_a_package.py:2: ModuleNotFoundError: No module named 'no_such_package_here'",
    ),
}


@pytest.fixture
def fork_dir(tmp_path, monkeypatch):
    for name, (text, _) in BROKEN.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in BROKEN:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_module_that_fails_as_it_imports_leads_with_its_file_line_and_error(name, fork_dir):
    with pytest.raises(ConfigError) as err:
        build(OmegaConf.create({"_target_": f"{name}.Model"}), "model")
    message = str(err.value)
    assert message.startswith(BROKEN[name][1]), message
    assert f"model._target_={name}.Model" in message and "\n" not in message, message


@pytest.mark.parametrize(
    ("target", "missing"),
    [
        ("not_a_module_anywhere.Model", "not_a_module_anywhere"),  # no such package
        ("harness.modelz.Transformer", "harness.modelz"),  # a module misspelled
        (
            "harness.models.Transformr",
            "harness.models.Transformr",
        ),  # a class misspelled in a module that exists
        ("torch.optim.AdamX", "torch.optim.AdamX"),
    ],
)
def test_a_target_whose_path_is_wrong_is_still_told_to_check_its_path(target, missing, fork_dir):
    with pytest.raises(ConfigError) as err:
        build(OmegaConf.create({"_target_": target}), "model")
    message = str(err.value)
    assert message.startswith(f"model._target_={target}: cannot be imported: check the module"), message
    assert f"No module named '{missing}'" in message and "hydra" not in message, message


@pytest.mark.slow  # two train.py runs, ~5 s each
def test_a_broken_fork_model_through_train_py_is_one_line_at_the_door(fork_dir, data_root):
    env = {"PYTHONPATH": str(fork_dir)}
    result = train("model._target_=unclosed.Model", *PROBES_OFF, cwd=fork_dir, data_root=data_root, env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("error: unclosed.py:7: SyntaxError: '(' was never closed"), lines[0]
    run = fork_dir / "run"
    assert not run.exists()  # the door imports each target, builds none: refused before any work

    fixed = train(
        "model=rnn", *PROBES_OFF, cwd=fork_dir, data_root=data_root
    )  # the same dir, its mistake fixed
    assert fixed.returncode == 0 and read_verdict(run)["status"] == "PASS", fixed.stderr[-2000:]

    (fork_dir / "door").mkdir()
    door = train("n=0", cwd=fork_dir / "door", data_root=data_root)  # refused at the door: nothing made
    assert door.returncode == 2 and not (fork_dir / "door" / "run").exists(), door.stderr[-2000:]
