"""A rank that dies or stops, on 2 CPU processes (gloo): named within a bound, every process of the run gone, the
verdict's fields filled and its status naming the rank, a checkpoint kept, and the run resumed from it the
uninterrupted run. The faults are made by a callback on one rank at one step (tests.forks.scale.FaultAt): SIGKILL
(the out-of-memory killer), SIGSTOP (a process frozen whole), a main thread blocked for good (a stuck read)."""

from __future__ import annotations

import json
import shlex
import signal
import time
from pathlib import Path

import pytest

from harness.train.distributed.heartbeat import Beat, alive
from tests.conftest import PROBES_OFF, start_train, torchrun_nodes, train
from tests.scale.conftest import metrics

#: a short mode=full run of two processes, checkpointed every 8 steps; a stall named after 6 s without a step
RUN = (
    *("mode=full", "data.size=64", "data.batch_size=8", "mode.max_steps=24", "mode.log_every=1"),
    *("mode.val_every=1000", "mode.ckpt_every=8", "preflight=false", "mode.progress_bar=false", *PROBES_OFF),
    *("watchdog.stall_s=6", "watchdog.silent_s=3", "watchdog.beat_s=0.5"),
)
#: the step the fault strikes at (the last checkpoint is step 8's)
AT = 12
#: seconds from the fault to the end of every process: a death is seen at once, a stall after stall_s
BOUND = {"kill": 20, "stop": 6 + 20, "hang": 6 + 20}


def fault(rank: int, kind: str) -> tuple[str, ...]:
    return (
        "+callbacks.fault._target_=tests.forks.scale.FaultAt",
        f"+callbacks.fault.rank={rank}",
        f"+callbacks.fault.step={AT}",
        f"+callbacks.fault.fault={kind}",
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory, data_root) -> dict[str, Path]:
    """The uninterrupted run of each strategy, by name."""
    runs = {}
    for trainer in ("ddp", "fsdp"):
        cwd = tmp_path_factory.mktemp(f"straight_{trainer}")
        result = train(*RUN, f"trainer={trainer}", cwd=cwd, data_root=data_root)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[trainer] = cwd / "run"
    return runs


def ranks_of(run_dir: Path) -> list[Beat]:
    """The processes the run's ranks beat from (their last heartbeats)."""
    return [Beat(**json.loads(p.read_text())) for p in sorted((run_dir / ".ranks").glob("*.json"))]


def struck(run_dir: Path, rank: int) -> float:
    """When the fault struck (FaultAt wrote it)."""
    return float((run_dir / f".fault_{rank}_{AT}").read_text())


def assert_named(verdict: dict, rank: int, status: str, run_dir: Path) -> None:
    """The verdict of a run a rank ended: its status, the rank named, every field it knew filled, where and how
    to resume."""
    assert verdict["status"] == status, verdict
    assert [n["rank"] for n in verdict["lost"]["ranks"]] == [rank], verdict["lost"]
    assert verdict["lost"]["seen_by"] == (1 if rank == 0 else 0)
    known = ("mode", "model", "model_group", "data", "length", "seed", "run_dir", "seconds", "final_loss")
    assert all(verdict[k] is not None for k in known), verdict
    assert verdict["steps"] >= AT and verdict["mode"] == "full" and verdict["run_dir"] == str(run_dir)
    assert verdict["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert Path(verdict["checkpoint"]).is_file()
    assert (
        verdict["resume"].startswith("python train.py ")
        and f"ckpt_path={verdict['checkpoint']}" in verdict["resume"]
    )
    assert f"rank {rank}" in verdict["error"]


def assert_resumes(verdict: dict, cwd: Path, data_root: Path, straight_run: Path) -> None:
    """The verdict's own command, in the same run dir, trains on to the uninterrupted run's metrics and verdict."""
    command = shlex.split(verdict["resume"])
    assert command[:2] == ["python", "train.py"]
    resumed = train(*command[2:], cwd=cwd, data_root=data_root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = json.loads((cwd / "run" / "verdict.json").read_text())
    assert done["status"] == "DONE" and done["steps"] == 24, done
    after, before = metrics(cwd / "run"), metrics(straight_run)
    losses = {s: r["train/loss"] for s, r in after.items() if "train/loss" in r}
    assert sorted(losses) == list(range(24)), sorted(losses)
    assert losses == {s: r["train/loss"] for s, r in before.items() if "train/loss" in r}


CASES = [
    ("ddp", 1, "kill", "RANK_LOST"),
    ("ddp", 0, "kill", "RANK_LOST"),
    ("ddp", 1, "stop", "RANK_STALLED"),
    ("ddp", 0, "stop", "RANK_STALLED"),
    ("ddp", 1, "hang", "RANK_STALLED"),
    ("fsdp", 1, "kill", "RANK_LOST"),
    ("fsdp", 0, "stop", "RANK_STALLED"),
]


@pytest.mark.slow  # per case two train.py runs of two processes (the fault, the resume): ~20-30 s
@pytest.mark.parametrize(
    ("trainer", "rank", "kind", "status"), CASES, ids=[f"{c[0]}-rank{c[1]}-{c[2]}" for c in CASES]
)
def test_a_rank_that_dies_or_stops_is_named_and_the_run_resumes(
    trainer, rank, kind, status, straight, tmp_path, data_root
):
    run_dir = tmp_path / "run"
    args = (f"data.root={data_root}", *RUN, f"trainer={trainer}", *fault(rank, kind))
    process = start_train(*args, run_dir=run_dir, cwd=tmp_path)
    out, err = process.communicate(timeout=180)  # every process that holds its pipes has ended
    ended = time.time()
    taken = ended - struck(run_dir, rank)
    assert taken < BOUND[kind], f"{taken:.1f} s from the fault to the end"
    survivor = 1 - rank
    # the survivor's exit is the verdict's code; rank 0's is the shell's (killed: SIGKILL, by the fault or by rank 1)
    assert process.returncode == (
        {"RANK_LOST": 6, "RANK_STALLED": 7}[status] if survivor == 0 else -signal.SIGKILL
    )
    beats = ranks_of(run_dir)
    # its pipes closed, a process may still be exiting (not yet a zombie) on a loaded machine: a moment's grace
    deadline = time.time() + 5
    while any(alive(b) for b in beats) and time.time() < deadline:
        time.sleep(0.1)
    assert [b.rank for b in beats] == [0, 1] and not any(alive(b) for b in beats), beats
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert_named(verdict, rank, status, run_dir)
    if kind != "kill":  # named with what it was doing: a frozen rank is silent, a blocked one behind
        named = verdict["lost"]["ranks"][0]
        assert ("no heartbeat" in named["what"]) == (kind == "stop"), named
        assert kind != "hang" or named["phase"] == "the hook on_train_batch_start", named
    console = [line for line in (out + err).splitlines() if status in line]
    assert len(console) == 1 and f"rank {rank}" in console[0], out[-2000:] + err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert_resumes(verdict, tmp_path, data_root, straight[trainer])


@pytest.mark.slow  # one train.py run of two processes
def test_a_ranks_own_error_is_the_runs_error_not_a_rank_lost(tmp_path, data_root):
    """Rank 1 raises a bug of its own: the run ends as ERROR (exit 1) naming rank 1 and its error, with every field
    rank 0 knew and no command to resume (it would meet the bug again); no process is left."""
    result = train(*RUN, "trainer=ddp", *fault(1, "raise"), cwd=tmp_path, data_root=data_root, timeout=180)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "ERROR" and verdict["steps"] == AT and verdict["model"] is not None, verdict
    (named,) = verdict["lost"]["ranks"]
    assert named["rank"] == 1 and "ValueError" in named["what"] and "rank 1's own bug" in verdict["error"]
    assert "resume" not in verdict and verdict["lost"]["seen_by"] == 0
    own_log = (tmp_path / "run" / "train_ddp_process_1.log").read_text()
    assert "Traceback" in own_log and "rank 1's own bug" in own_log  # where the verdict says to look
    assert not any(alive(b) for b in ranks_of(tmp_path / "run"))


@pytest.mark.slow  # one train.py run of two processes, slowed down
def test_a_slow_but_moving_run_is_not_a_stall(tmp_path, data_root):
    """Rank 0 takes 1 s a step, 1 s a validation batch (3 s a validation) and 5 s in each checkpoint's save while
    rank 1 waits for it, with stall_s=3: moving, or one long operation still beating, it is never a stall."""
    slow = (
        "+callbacks.slow._target_=tests.forks.scale.Slow",
        "+callbacks.slow.step_s=1",
        "+callbacks.slow.val_s=1",
        "+callbacks.slow.checkpoint_s=5",
    )
    args = (
        *RUN,
        "trainer=ddp",
        "mode.max_steps=6",
        "mode.ckpt_every=3",
        "mode.val_every=3",
        "data.val_size=64",
    )
    result = train(
        *args, "watchdog.stall_s=3", "watchdog.silent_s=2", *slow, cwd=tmp_path, data_root=data_root
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "DONE" and verdict["steps"] == 6 and verdict["seconds"] > 3 * 5, verdict


#: torch's own switch: each attempt of a torchrun job its own store (the door refuses restarts without it)
OWN_STORES = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
TORCHRUN = (*RUN, "trainer=ddp", "trainer.devices=1", "trainer.num_nodes=2", "mode.ckpt_every=8")


@pytest.mark.slow  # two torchrun launches of one process each
def test_a_node_lost_under_torchrun_ends_the_other(tmp_path, data_root):
    """`torchrun --nnodes=2` on 127.0.0.1, node 1's process killed: node 0 names it and ends with the verdict."""
    run_dir = tmp_path / "run"
    args = (f"data.root={data_root}", *TORCHRUN, *fault(1, "kill"), f"hydra.run.dir={run_dir}")
    nodes = torchrun_nodes(*args, cwd=tmp_path, name="lost", timeout=180)
    taken = time.time() - struck(run_dir, 1)
    assert [code for code, _ in nodes] == [1, 1], nodes[0][1][
        -3000:
    ]  # torchrun's own code for a failed worker
    assert taken < BOUND["kill"] + 10, f"{taken:.1f} s"
    assert not any(alive(b) for b in ranks_of(run_dir))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert_named(verdict, 1, "RANK_LOST", run_dir)


@pytest.mark.slow  # two torchrun launches of one process each, the job run twice; and the run uninterrupted
def test_torchrun_restarts_resume_from_the_last_checkpoint_by_themselves(tmp_path, data_root):
    """With --max-restarts=1, the job torchrun starts again after node 1's process is killed continues in its run
    dir from its own last.ckpt (the verdict it stopped with says RANK_LOST): DONE, with the uninterrupted run's
    losses at every step."""
    runs = {}
    for name, extra in (("restarted", fault(1, "kill")), ("straight", ())):
        run_dir = tmp_path / name
        args = (f"data.root={data_root}", *TORCHRUN, *extra, f"hydra.run.dir={run_dir}")
        nodes = torchrun_nodes(
            *args, cwd=tmp_path, name=name, timeout=240, flags=("--max-restarts=1",), env=OWN_STORES
        )
        assert [code for code, _ in nodes] == [0, 0], nodes[0][1][-3000:] + nodes[1][1][-3000:]
        runs[name] = run_dir
    verdict = json.loads((runs["restarted"] / "verdict.json").read_text())
    assert verdict["status"] == "DONE" and verdict["steps"] == 24, verdict
    log = (runs["restarted"] / "train.log").read_text()
    assert "RANK_LOST" in log and "resuming from" in log and str(runs["restarted"] / "checkpoints") in log
    after, before = metrics(runs["restarted"]), metrics(runs["straight"])
    losses = {s: r["train/loss"] for s, r in after.items() if "train/loss" in r}
    assert sorted(losses) == list(range(24)) and losses == {
        s: r["train/loss"] for s, r in before.items() if "train/loss" in r
    }
