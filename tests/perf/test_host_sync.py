"""Code outside the harness that copies device to host inside a training step, named by file and line with its count
a step (`host_sync`, harness.train.perf.host_sync): the attribution, the counting, a planted model, healthy runs."""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.train.overfit import achievable_floor
from harness.train.perf.copies import CopyCounter, shown_path, user_site
from harness.train.perf.host_sync import CUDA_CALL, CUDA_WARNING, SyncWarnings, host_syncs
from tests.conftest import PROBES_OFF, train
from tests.train.conftest import FORK

HERE = shown_path(str(Path(__file__).resolve()))  # tests/perf/test_host_sync.py, as imported


class ItemEveryBlock(nn.Module):
    """A small language model that reads each block's output on the host: one `.item()` a block, every step."""

    def __init__(self, vocab_size: int, d_model: int = 16, layers: int = 3, vectorize: bool = True):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab_size)
        self.largest = 0.0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        for block in self.blocks:
            x = x + torch.tanh(block(x))
            self.largest = max(self.largest, x.abs().amax().item())  # planted: a copy to the host a block
        return self.head(x)


PLANTED_LINE = next(
    i
    for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
    if line.endswith("# planted: a copy to the host a block")
)


def line_of_next_call() -> int:
    return sys._getframe(1).f_lineno + 1


# --- the attribution and the count -------------------------------------------------------------------------------


def test_a_copy_is_named_by_the_line_outside_torch_that_asked_and_the_harnesss_own_are_not_counted():
    counts, x = Counter(), torch.arange(4.0)
    batch = {"input_ids": torch.zeros(1, 2, dtype=torch.long), "targets": torch.zeros(1, 2, dtype=torch.long)}
    batch["loss_mask"] = torch.ones(1, 2, dtype=torch.bool)
    mode = CopyCounter(counts)
    mode.step = 4
    with mode:
        asked = line_of_next_call()
        x.sum().item(), bool(x.sum()), x[x > 1]
        torch.nn.functional.softmax(x, 0).tolist()  # inside a torch call's own Python: still this line's
        achievable_floor(batch)  # the harness's own .tolist(): not the user's
    assert dict(counts) == {
        (4, f"{HERE}:{asked}", "item"): 1,
        (4, f"{HERE}:{asked}", "__bool__"): 1,
        (4, f"{HERE}:{asked}", "__getitem__"): 1,
        (4, f"{HERE}:{asked + 1}", "tolist"): 1,
    }, counts


def test_a_frame_of_the_harnesss_own_is_no_users_site():
    inside = []  # the frame that called `site`: the counter's own, in the harness
    mode = CopyCounter(Counter(), site=lambda frame: inside.append(sys._getframe(1)))
    mode.step = 0
    with mode:
        torch.ones(1).item()
    assert inside and "harness/train/perf/copies.py" in inside[0].f_code.co_filename, inside
    assert user_site(inside[0]) is None
    assert user_site(sys._getframe()) == f"{HERE}:{sys._getframe().f_lineno}"


def test_on_a_gpu_a_sync_debug_warning_is_counted_by_the_line_that_warned_and_others_still_shown():
    """The warning CUDA's sync debug mode raises, raised here as torch raises it (from the line that synced)."""
    counts, shown = Counter(), []
    message = f"{CUDA_WARNING} (Triggered internally at c10/cuda/CUDAFunctions.cpp:151.)"
    before = warnings.showwarning

    def stand_in(message, *rest, **kwargs):
        shown.append(str(message))

    warnings.showwarning = stand_in
    try:
        with SyncWarnings(counts, step=3):
            first = line_of_next_call()
            warnings.warn(message, stacklevel=1)
            warnings.warn(message, stacklevel=1)  # counted each time, not once a place
            warnings.warn("something else", UserWarning, stacklevel=1)
        assert warnings.showwarning is stand_in  # put back as it was
    finally:
        warnings.showwarning = before
    expected = {(3, f"{HERE}:{first}", CUDA_CALL): 1, (3, f"{HERE}:{first + 1}", CUDA_CALL): 1}
    assert dict(counts) == expected, counts
    assert shown == ["something else"], shown


def test_the_symptoms_name_the_lines_that_copy_most_with_their_count_a_step():
    counts = Counter(
        {(3, "model.py:12", "item"): 3, (7, "model.py:12", "item"): 3, (3, "loss.py:5", "__bool__"): 2}
    )
    counts[(7, "data.py:9", "cpu")] = 1
    found = host_syncs(counts, sampled=[3, 7], sites=2)
    assert [(s.where, s.value, s.step) for s in found] == [("model.py:12", 3.0, 3), ("loss.py:5", 1.0, 3)], (
        found
    )
    assert ".item() x3" in found[0].detail and "sampled steps 3, 7" in found[0].detail, found[0].detail
    assert all(s.name == "host_sync" and s.suggestion for s in found)


# --- train.py runs -----------------------------------------------------------------------------------------------


def _symptoms(run_dir: Path) -> list[dict]:
    verdict = json.loads((run_dir / "verdict.json").read_text())
    return [s for s in verdict["symptoms"] if s["name"] == "host_sync"]


@pytest.mark.slow  # ~5 s: a train.py run of 10 steps
def test_a_model_that_reads_every_blocks_output_is_named_with_its_line_and_copies_a_step(tmp_path, data_root):
    result = train(
        "model=rnn",  # the planted model takes the RNN's arguments
        "model._target_=tests.perf.test_host_sync.ItemEveryBlock",
        "model.layers=3",
        "mode=full",
        "mode.max_steps=10",
        "mode.log_every=2",  # Lightning logs on steps 1, 3, 5, ...: the sampled steps 3 and 7 move on to 4 and 8
        "preflight=false",
        *PROBES_OFF,
        cwd=tmp_path,
        data_root=data_root,
        env=FORK,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = _symptoms(tmp_path / "run")
    assert [(s["where"], s["value"], s["step"]) for s in found] == [(f"{HERE}:{PLANTED_LINE}", 3.0, 4)], found
    assert "sampled steps 4, 8" in found[0]["detail"], found
    assert f"symptom host_sync in {HERE}:{PLANTED_LINE}" in result.stdout + result.stderr  # the console


@pytest.mark.slow  # ~5 s a run: the whole default pipeline, preflight and probes included
@pytest.mark.parametrize("model", ["model=transformer", "model=gpt"])
def test_the_built_in_models_copy_nothing_to_the_host_in_a_step(model, tmp_path, data_root):
    result = train(model, cwd=tmp_path, data_root=data_root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _symptoms(tmp_path / "run") == []
    assert "host_sync: steps [3, 7] watched, no copy" in (tmp_path / "run" / "train.log").read_text()
