"""What copies between device and host in a training step, and whose code asks (tests/helpers/host_copies.py): on a
GPU each such copy stalls the device until its queue drains; on this CPU it is counted where it is asked for."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
import torch

from tests.conftest import train
from tests.helpers.host_copies import _Counting, harness_copies


def line_of_next_call() -> int:
    return sys._getframe(1).f_lineno + 1


def test_the_counter_sees_each_kind_of_copy_and_names_the_line_that_asked():
    counts, x = Counter(), torch.arange(4.0)
    mode = _Counting(counts)
    mode.step = 0
    with mode:
        first = line_of_next_call()
        x.sum().item(), x.tolist(), bool(x.sum()), float(x.sum()), x[x > 1], x.nonzero(), x.cpu()
        torch.tensor([1.0], device="cpu")
        x + 1, x.sum(), x.amax(), torch.tensor([1.0])  # device work, or a host tensor made on the host: none
    here = f"{__name__.rpartition('.')[2]}.py"
    calls = ["item", "tolist", "__bool__", "__float__", "__getitem__", "nonzero", "cpu"]
    expected = {(0, f"{here}:{first}", call): 1 for call in calls} | {(0, f"{here}:{first + 1}", "tensor"): 1}
    assert dict(counts) == expected, counts


@pytest.mark.slow  # ~10 s each: a 30-step train.py run
# gpt 256 wide: matrices over 65,536 entries, whose squares the guard and the probes sum in pieces (shard_sums)
@pytest.mark.parametrize(
    ("model", "mode"),
    [
        (("model=transformer",), "mode=full"),
        (("model=gpt", "model.d_model=256"), "mode=full"),
        (("model=transformer",), "mode=overfit"),
        (("model=gpt", "model.d_model=256"), "mode=overfit"),
    ],
    ids=["default-full", "gpt-full", "default-overfit", "gpt-overfit"],
)
def test_the_harness_copies_nothing_on_a_quiet_step_and_once_on_a_logging_step(
    model, mode, tmp_path, data_root
):
    counted = tmp_path / "copies.json"
    result = train(
        *model,
        mode,
        "mode.max_steps=30",
        *(["mode.target_loss=0"] if mode == "mode=overfit" else []),  # overfit mode: all 30 steps
        "preflight=false",
        "+callbacks.copies._target_=tests.helpers.host_copies.HostCopies",
        f"+callbacks.copies.path={counted}",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode in (0, 1), result.stderr[-3000:]  # overfit mode: FAIL, its target unreachable
    copies = json.loads(counted.read_text())
    logged = set(copies["logged"])
    assert logged == (set(range(30)) if mode == "mode=overfit" else {9, 19, 29}), logged
    # step 0 is one of the probes that work every 100 steps, which copy on their own steps (histograms' ranges and
    # exact sums: docs/performance.md); the last step's window holds the end of training's reads (the final loss)
    assert harness_copies(copies, range(1, 29)) == []
    assert all(copies["steps"].get(str(step)) for step in logged - {0, 29})  # the counter saw each one's copy


def test_the_rule_names_a_copy_on_a_quiet_step_and_a_second_on_a_logging_step():
    copies = {
        "logged": [2],
        "steps": {
            "1": {"harness/train/nonfinite.py:9": {"__bool__": 1}, "model.py:3": {"item": 4}},
            "2": {"harness/train/perf/readout.py:41": {"tolist": 1}, "harness/probes/x.py:5": {"item": 1}},
            "3": {"model.py:3": {"item": 4}},
            "4": {"harness/train/perf/readout.py:41": {"tolist": 1}},
        },
    }
    assert harness_copies(copies, range(1, 5)) == [
        "step 1 (quiet): {'harness/train/nonfinite.py:9': 1}",
        "step 2 (logging): {'harness/train/perf/readout.py:41': 1, 'harness/probes/x.py:5': 1}",
        "step 4 (quiet): {'harness/train/perf/readout.py:41': 1}",
    ]
