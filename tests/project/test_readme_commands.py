"""The README's commands run as written after `make train`: in a shell that activates `.venv` as the README says,
from the repository's root, with nothing of this test process's environment making `harness` importable."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
VENV = ROOT / ".venv"


def activation() -> str:
    """The line of a README code block that activates the virtual environment."""
    lines = re.findall(r"^(source \S+/activate)\b", README.read_text(), flags=re.MULTILINE)
    assert lines, "the README never says how to activate .venv: `python train.py` fails after `make train`"
    return lines[0]


def readme_commands(text: str) -> list[str]:
    """Every `python ...` command the README shows, in inline code or as a `$ ` line, without its comment."""
    found = re.findall(r"`(python [^`]+)`", text) + re.findall(r"^\$ (python .+)$", text, flags=re.MULTILINE)
    commands = []
    for command in found:
        command = command.split("  #")[0].strip()
        if "..." in command or command not in commands:
            commands += [] if "..." in command else [command]
    return commands


def first_job(command: str) -> str:
    """A sweep's command as its first job's: no -m, each list of values its first."""
    words = [w for w in command.split() if w not in ("-m", "--multirun")]
    return " ".join(w.split(",")[0] if "=" in w else w for w in words)


def shell(command: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """`command` after the README's activation line, in bash, with an environment that knows no virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(VENV))
    )
    return subprocess.run(
        ["bash", "-c", f"cd {ROOT} && {activation()} && {command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_the_readme_says_how_to_activate_the_environment_it_runs_in():
    assert activation() == "source .venv/bin/activate"
    commands = readme_commands(README.read_text())
    assert "python train.py mode=overfit n=2" in commands and len(commands) >= 6, commands


def test_the_command_reader_sees_inline_and_prompt_commands_and_skips_placeholders():
    text = "run `python a.py x=1`, then\n```\n$ python b.py -m y=2   # a comment\n```\n`python c.py key=value ...`"
    assert readme_commands(text) == ["python a.py x=1", "python b.py -m y=2"]
    assert first_job("python train.py -m data.length=10,50,200 n=1") == "python train.py data.length=10 n=1"


@pytest.mark.slow  # a shell and the imports a command (~5 s each), and one real run
def test_every_readme_command_runs_as_written_in_the_activated_environment(tmp_path):
    where = f"hydra.run.dir={tmp_path}/run data.root={tmp_path}/data"
    trained = None
    for command in readme_commands(README.read_text()):
        if command == "python train.py mode=overfit n=2":  # what `make train` runs: run for real
            done = shell(f"{command} {where} probes=off")
            trained = tmp_path / "run"
        elif command.startswith("python -m harness.report"):
            continue  # needs the run above: below
        else:  # composed, every import made, nothing trained (Hydra's --cfg job; a sweep's first job)
            done = shell(f"{first_job(command)} --cfg job")
        assert done.returncode == 0, (command, done.stderr[-3000:])
        assert "ModuleNotFoundError" not in done.stderr, (command, done.stderr[-3000:])
    assert trained is not None and json.loads((trained / "verdict.json").read_text())["status"] == "PASS"
    (trained / "report.html").unlink()
    done = shell(f"python -m harness.report {trained}")
    assert done.returncode == 0 and (trained / "report.html").is_file(), done.stderr[-3000:]
