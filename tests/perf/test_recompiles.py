"""Under compile, the training forward compiled again and again, named with dynamo's reason and what to change
(`recompiles`, harness.train.perf.recompiles): the reasons torch gives, the count, a planted model, a healthy run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from harness.errors import ConfigError
from harness.tasks.validate import validate
from harness.train.perf.copies import shown_path
from harness.train.perf.recompiles import Recompiles, reason_of
from harness.train.perf.watches import perf_callbacks
from tests.conftest import PROBES_OFF, train
from tests.train.conftest import FORK

HERE = shown_path(str(Path(__file__).resolve()))


class CountsCalls(nn.Module):
    """A small language model whose forward reads a Python counter that changes every call: each call a new guard."""

    def __init__(self, vocab_size: int, d_model: int = 16, layers: int = 1, vectorize: bool = True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.calls = 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        self.calls += 1  # planted: a Python number forward reads, different every call
        return self.head(self.token_embedding(input_ids) * (1 + 1 / self.calls))


PLANTED_LINE = next(
    i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.endswith("every call")
)


# --- dynamo's reasons, as this torch gives them -------------------------------------------------------------------


def compiled_again(function, *calls) -> list:
    """Dynamo's records of the compilations `function` compiled with aot_eager makes over `calls` (argument tuples)."""
    from torch._dynamo.utils import get_compilation_metrics  # what Recompiles reads

    before = len(get_compilation_metrics())
    compiled = torch.compile(function, backend="aot_eager")
    for args in calls:
        compiled(*args)
    return [r for r in get_compilation_metrics()[before:] if r.co_name]


@pytest.mark.parametrize(
    "case",
    ["a dimension changes size", "a Python counter changes"],
)
def test_dynamos_reason_is_read_into_the_guard_the_line_and_the_fix(case, one_thread):
    torch._dynamo.reset()
    if case == "a dimension changes size":
        records = compiled_again(lambda x: x * 2, (torch.ones(2),), (torch.ones(3),))
        expected_guard, expected_line, fix = "size mismatch at index 0", None, "mark it dynamic"
    else:
        model = CountsCalls(vocab_size=4)
        records = compiled_again(model, *[(torch.zeros(1, 2, dtype=torch.long),)] * 2)
        expected_guard, expected_line, fix = "self.calls == 0", f"{HERE}:{PLANTED_LINE}", "Python number"
    # torch's "0/1": the function's second compilation
    assert [r.compile_id.split("/")[1] for r in records] == ["0", "1"], records
    reason = reason_of(records[1].recompile_reason)
    assert expected_guard in reason.guard and reason.line == expected_line and fix in reason.fix, (
        reason,
        records[1].recompile_reason,
    )


def record(compile_id: str, reason: str | None = None, fail: str | None = None, name: str | None = "forward"):
    """A compilation as dynamo records it (torch._dynamo.utils.CompilationMetrics), the fields Recompiles reads."""
    return SimpleNamespace(
        compile_id=compile_id,
        co_name=name,
        co_filename="model.py",
        co_firstlineno=12,
        recompile_reason=reason,
        fail_reason=fail,
    )


def test_the_first_compilations_of_a_function_are_allowed_and_the_rest_named_once():
    watch = Recompiles(allowed=2)
    size = "0/0: tensor 'L['x']' size mismatch at index 0. expected 8, actual 5"
    guard = "0/2: self.calls == 2  # self.calls += 1  # model.py:14 in forward"
    seen = [
        watch.judge(record("0/0"), 1),
        watch.judge(record("0/1", size), 2),  # the last, smaller batch: the dimension is dynamic from now on
        watch.judge(record("1/0", name="torch_dynamo_resume_in_forward"), 2),  # another function's first
        watch.judge(record("0/2", "0/1: self.calls == 1"), 3),
        watch.judge(record("0/3", guard), 4),
        watch.judge(record("0/4", guard), 5),
    ]
    assert seen[:4] == [None] * 4 and seen[5] is None, seen
    found = seen[4]
    assert (found.name, found.step, found.where, found.value) == (
        "recompiles",
        4,
        "forward (model.py:12)",
        3,
    ), found
    assert "`self.calls == 2`" in found.detail and "Python value" in found.suggestion, found
    limit = watch.judge(record("0/8", guard, fail="Dynamo recompile limit exceeded", name=None), 9)
    assert (
        limit.where == "forward (model.py:12): recompile limit" and "recompile_limit" in limit.suggestion
    ), limit


def test_the_config_builds_each_watch_it_enables_and_refuses_a_key_it_does_not_know(make_config, tmp_path):
    def watches(*overrides: str) -> list[str]:
        made = perf_callbacks(make_config("perf.flops=false", *overrides), tmp_path)
        return [type(c).__name__ for c in made]

    assert watches() == ["Speed", "HostSync", "Straggler"]  # recompiles only under compile
    assert watches("compile=aot_eager", "perf.symptoms.straggler.enabled=false") == [
        "Speed",
        "HostSync",
        "Recompiles",
    ]
    assert watches("perf.enabled=false") == []
    with pytest.raises(
        ConfigError, match=r"perf.symptoms.host_sync.stepz=\[1\]: no such key; it takes steps, sites"
    ):
        watches("+perf.symptoms.host_sync.stepz=[1]")
    # a watch's range is its declaration's (harness.config.groups.trainer), held at the door
    with pytest.raises(ConfigError, match=r"^perf.symptoms.recompiles.allowed=-1: must be >= 0"):
        validate(make_config("compile=true", "perf.symptoms.recompiles.allowed=-1"))
    with pytest.raises(ConfigError, match=r"^perf.symptoms.straggler.patience=0: must be >= 1"):
        validate(make_config("perf.symptoms.straggler.patience=0"))


# --- train.py runs -----------------------------------------------------------------------------------------------


def _run(tmp_path, data_root, *args) -> tuple[list[dict], str]:
    result = train("compile=aot_eager", *args, cwd=tmp_path, data_root=data_root, env=FORK)
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    log = (tmp_path / "run" / "train.log").read_text()
    return [s for s in verdict["symptoms"] if s["name"] == "recompiles"], log


@pytest.mark.slow  # ~6 s: a compiled train.py run of 12 steps, compiling 8 times
def test_a_forward_reading_a_changing_counter_is_named_with_the_guard_that_failed(tmp_path, data_root):
    found, _ = _run(
        tmp_path,
        data_root,
        "model=rnn",  # the planted model takes the RNN's arguments
        "model._target_=tests.perf.test_recompiles.CountsCalls",
        "mode=full",
        "mode.max_steps=12",
        "preflight=false",
        *PROBES_OFF,
    )
    again = [s for s in found if not s["where"].endswith("recompile limit")]
    assert len(again) == 1 and again[0]["where"] == f"{HERE}:{PLANTED_LINE}", found
    # the third compilation after the first, at step 3: the counter's value then depends on what else ran the model
    assert again[0]["step"] == 3 and re.search(r"`self.calls == \d+`", again[0]["detail"]), again
    assert "Python number" in again[0]["suggestion"], again
    limit = [s for s in found if s["where"].endswith("recompile limit")]
    assert len(limit) == 1 and "runs uncompiled" in limit[0]["detail"], found


@pytest.mark.slow  # ~6 s: the default pipeline, compiled
def test_the_default_model_compiles_once(tmp_path, data_root):
    found, log = _run(tmp_path, data_root)
    assert found == [], found
    assert "recompiles: 1 compilations while training, 0 after a function's first" in log, log[-2000:]
