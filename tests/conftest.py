"""Shared fixtures: compose the real config in-process, or run the real train.py in a subprocess."""

from __future__ import annotations

import contextlib
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

with contextlib.suppress(ModuleNotFoundError):  # a fork that removed examples/ keeps a working suite
    import examples.twin  # noqa: F401  (registers the guide's Twin: the twin tests compare it like a built-in)

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
#: the tests' own config folder: `hydra.searchpath=[file://{TESTS_CONF}] data=fork` plugs in a fork's datamodule
TESTS_CONF = Path(__file__).resolve().parent / "conf"
#: data options that keep no files under data.root: the tests give those no data.root
OWN_ROOT = ("data=folder", "data=fork")

#: a quick run's overrides to switch the probes off: none where a fork has deleted them (conf/probes/)
PROBES_OFF = ("probes=off",) if (CONF / "probes").is_dir() else ()
#: a test that reads what the probes write runs only where they exist
needs_probes = pytest.mark.skipif(not (CONF / "probes").is_dir(), reason="this project has no probes")


def sampled(cases, every: int = 3) -> list:
    """Parametrize cases, one in `every` in the quick tier (make test) and the others marked slow (make
    test-slow, which CI runs too): a long table's every row is tested, its spread in the quick tier."""
    return [
        case
        if i % every == 0
        else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
        for i, case in enumerate(cases)
    ]


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu are skipped, with the reason shown, where no CUDA device is visible."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked gpu)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and two threads stall on a shared two-core machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """One data folder for the session: datasets are generated once and shared, as in real use."""
    return tmp_path_factory.mktemp("data")


def compose_config(overrides: list[str], run_dir: Path, data_root: Path):
    """The config train.py would build for `overrides`, ready for harness.tasks.training.run (HydraConfig set)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="train"):
        root = (
            [] if set(OWN_ROOT) & set(overrides) else [f"data.root={data_root}"]
        )  # a folder is its own root
        cfg = compose(config_name="train", overrides=[*root, *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    return cfg


@pytest.fixture
def make_config(tmp_path, data_root):
    def make(*overrides: str, run_dir: Path | None = None):
        return compose_config(list(overrides), run_dir or tmp_path / "run", data_root)

    return make


def train(
    *args: str, cwd: Path, data_root: Path, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the real `python train.py ARGS` with outputs under `cwd` and stdin closed."""
    flags = [a for a in args if a.startswith("-")]  # Hydra's flags (-m) go before the overrides
    root = [] if set(OWN_ROOT) & set(args) else [f"data.root={data_root}"]  # a folder is its own root
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        *flags,
        *root,
        f"hydra.run.dir={cwd}/run",
        f"hydra.sweep.dir={cwd}/sweep",
        *(a for a in args if not a.startswith("-")),
    ]
    return run_command(*command, cwd=cwd, env=env, timeout=timeout)


def run_command(
    *command: str, cwd: Path, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run `command` to its end with stdin closed, its output kept as text; `env` adds to this environment."""
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def start_command(*command: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """Start `command` with stdin closed, its output kept as text; `env` adds to this environment."""
    return subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def torchrun_nodes(
    *args: str,
    cwd: Path,
    name: str,
    timeout: float = 300,
    flags: tuple[str, ...] = (),
    env: dict | None = None,
) -> list[tuple[int, str]]:
    """`train.py ARGS` on two "machines" of one process each, on 127.0.0.1: two torchrun launches with --nnodes=2
    meeting through a c10d rendezvous (`name` its id), as on a cluster; `flags` are torchrun's own (e.g.
    --max-restarts=1), `env` added to theirs. (exit code, stderr) of each launch; a hang leaves no launch behind."""
    import socket

    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", *flags),
        *("--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={name}"),
        *(str(ROOT / "train.py"), *args),
    ]
    nodes = [start_command(*command, cwd=cwd, env=env) for _ in range(2)]
    try:
        errors = [node.communicate(timeout=timeout)[1] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    return [(node.returncode, error) for node, error in zip(nodes, errors, strict=True)]


def start_train(*args: str, run_dir: Path, cwd: Path) -> subprocess.Popen:
    """Start the real `python train.py ARGS` writing to `run_dir`, stdin closed: for a test that signals or kills
    it part-way (see wait_for_steps)."""
    return start_command(sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={run_dir}", cwd=cwd)


def wait_for_steps(metrics: Path, steps: int, process: subprocess.Popen, timeout: float = 120) -> None:
    """Return once `metrics` (a run's metrics.csv) has a training row at step `steps` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if metrics.exists():
            with open(metrics) as f:
                if any(r.get("train/loss") and int(r["step"]) >= steps for r in csv.DictReader(f)):
                    return
        time.sleep(0.05)
    raise TimeoutError(f"no step {steps} in {metrics}")


@pytest.fixture
def run_train(tmp_path, data_root):
    def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return train(*args, cwd=tmp_path, data_root=data_root, **kwargs)

    return run


def metrics_but_the_clock(run_dir: Path) -> list[dict]:
    """metrics.csv's rows, each without the perf/ columns: seconds and rates, which the machine decides."""
    with open(Path(run_dir) / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(f)]
