"""What copies between device and host in a training step, and whose code asks (tests/helpers/host_copies.py): on a
GPU each such copy stalls the device until its queue drains; on this CPU it is counted where it is asked for."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
import torch

from tests.conftest import train
from tests.helpers.host_copies import _Counting


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


#: the harness's own copies on a step that logs nothing, one each, until each is gone: the non-finite guard's bool()
#: of its norms, and the .tolist() of the gradient-norm and dead-gradient probes (both every step by default)
EVERY_STEP = ("harness/train/nonfinite.py", "harness/probes/layers/norms.py", "harness/probes/layers/dead.py")


@pytest.mark.slow  # ~10 s: a 30-step train.py run
# gpt 256 wide: matrices over 65,536 entries, whose squares the guard and the probes sum in pieces (shard_sums)
@pytest.mark.parametrize(
    "model", [("model=transformer",), ("model=gpt", "model.d_model=256")], ids=["default", "gpt"]
)
def test_a_step_that_logs_nothing_copies_to_the_host_only_where_known(model, tmp_path, data_root):
    counted = tmp_path / "copies.json"
    result = train(
        *model,
        "mode=full",
        "mode.max_steps=30",
        "preflight=false",
        "+callbacks.copies._target_=tests.helpers.host_copies.HostCopies",
        f"+callbacks.copies.path={counted}",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    copies = json.loads(counted.read_text())
    # steps Lightning writes no metrics on, and no probe of a period of 10 or more logs on
    quiet = [step for step in range(1, 30) if step not in copies["logged"] and step % 10]
    assert len(quiet) >= 20, copies["logged"]
    for step in quiet:
        asked = Counter()
        for where, calls in copies["steps"].get(str(step), {}).items():
            if where.startswith("harness/"):
                asked[where.rpartition(":")[0]] += sum(calls.values())
        assert asked == Counter(dict.fromkeys(EVERY_STEP, 1)), f"step {step}: {dict(asked)}"
    # a logging step hands Lightning the learning rate as a tensor already on the device, not a float to copy there
    for step in copies["logged"]:
        made = {where: calls for where, calls in copies["steps"][str(step)].items() if "tensor" in calls}
        assert not made, f"step {step}: {made}"
