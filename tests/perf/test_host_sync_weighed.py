"""`host_sync` names what is worth acting on: the user's own lines from one copy a step, an installed library's
copy (named `<its line>, called from <yours>`, with a fix the caller can apply) only where one call path repeats
it (perf.symptoms.host_sync.min_per_step); model=hf makes no copy; planted slow models are still named."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.errors import ConfigError
from harness.models import HFCausalLM
from harness.models.hf_causal_lm import CAUSAL_SDPA
from harness.ops.loss import CrossEntropy
from harness.tasks.validate import validate
from harness.train.perf.copies import CopyCounter, library_of, shown_path, user_site
from harness.train.perf.host_sync import HostSync, host_syncs, repeats_of
from tests.conftest import PROBES_OFF, train
from tests.perf.test_host_sync import ItemEveryBlock
from tests.train.conftest import FORK

HERE = shown_path(str(Path(__file__).resolve()))
#: a stand-in installed library: one copy a call (`once`), or one a tensor of a list (`each`)
LIBRARY = """
def once(x):
    return bool(x.isfinite().all())


def each(xs):
    return [x.abs().amax().item() for x in xs]


def twice(x):
    first = once(x)
    return first and once(x)
"""


def _planted(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# planted: {marker}"))


class MaskEveryLayer(ItemEveryBlock):
    """test_host_sync's small language model, indexing each layer's output by a boolean mask instead: a copy a
    layer, every step."""

    def __init__(self, vocab_size: int, **sizes):
        super().__init__(vocab_size, **sizes)
        self.active = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        for block in self.blocks:
            x = x + torch.tanh(block(x))
            self.active.append(x[x > 0])  # planted: a mask index a layer
        self.active.clear()
        return self.head(x)


class TensorEveryStep(MaskEveryLayer):
    """The same model scaling its output by a constant made on the device each forward: a copy a step."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids)
        for block in self.blocks:
            x = x + torch.tanh(block(x))
        scale = torch.tensor(len(self.blocks) ** -0.5, device=x.device)  # planted: a tensor made each step
        return self.head(x * scale)


class FiniteCheckedLoss(CrossEntropy):
    """Cross entropy that checks its logits on the host before it computes: a bool() a step."""

    def __call__(self, logits, targets, loss_mask):
        if not logits.isfinite().all():  # planted: a bool a step
            raise FloatingPointError("non-finite logits")
        return super().__call__(logits, targets, loss_mask)


class ForkLlama(nn.Module):
    """A fork's own wrapper of a transformers Llama (not model=hf); with `each_layer`, it reads every layer's
    hidden states on the host through the stand-in library (a copy a layer, the library's)."""

    def __init__(self, vocab_size: int, d_model: int = 32, layers: int = 2, each_layer: bool = False):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        sizes = dict(hidden_size=d_model, intermediate_size=2 * d_model, num_attention_heads=4)
        config = LlamaConfig(vocab_size=vocab_size, num_hidden_layers=layers, **sizes)
        config.bos_token_id = config.eos_token_id = config.pad_token_id = None
        self.lm, self.each_layer = LlamaForCausalLM(config), each_layer

    @property
    def token_embedding(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.lm(input_ids=input_ids, use_cache=False, output_hidden_states=self.each_layer)
        if self.each_layer:
            importlib.import_module("copylib").each(out.hidden_states)  # planted: a library copy a layer
        return out.logits


@pytest.fixture
def library(tmp_path, monkeypatch):
    """The stand-in library, installed under a site-packages folder of its own; its folder."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    (folder / "copylib.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "copylib", raising=False)
    return folder


def _line() -> int:
    return sys._getframe(1).f_lineno


def _count(run) -> tuple[Counter, dict[str, float]]:
    counts, paths = Counter(), Counter()
    mode = CopyCounter(counts, paths=paths)
    mode.step = 0
    with mode:
        run()
    return counts, repeats_of(paths, batches=1)


# --- whose copy, and what it is worth -------------------------------------------------------------------------


def test_a_library_the_harness_calls_outside_its_models_copies_for_the_harness_not_the_user(library):
    """Planted: code compiled as a probe's file and as a model's file of the harness, each calling the library."""
    import copylib

    from harness.train.perf.copies import HARNESS

    calls = {}
    for where in ("probes/planted_probe.py", "models/planted_model.py"):
        code = compile("def call(lib, x):\n    lib.once(x)\n", f"{HARNESS}{where}", "exec")
        exec(code, calls.setdefault(where, {}))
    x = torch.arange(4.0)
    counts, _ = _count(lambda: [space["call"](copylib, x) for space in calls.values()])
    assert set(counts) == {(0, "copylib.py:3, called from harness/models/planted_model.py:2", "__bool__")}, (
        counts
    )


def test_a_librarys_copy_is_named_as_the_librarys_called_from_the_users_line(library):
    import copylib

    x = torch.arange(4.0)
    called = _line() + 1
    counts, _ = _count(lambda: (copylib.once(x), x.sum().item()))
    assert set(counts) == {
        (0, f"copylib.py:3, called from {HERE}:{called}", "__bool__"),
        (0, f"{HERE}:{called}", "item"),  # the user's own, named as before
    }, counts
    assert [library_of(where) for _, where, _ in sorted(counts)] == ["copylib", None], counts
    assert user_site(sys._getframe()) == f"{HERE}:{_line()}"


def test_a_librarys_one_copy_a_forward_is_not_named_but_a_copy_a_tensor_is(library):
    import copylib

    xs = [torch.ones(2) * i for i in range(4)]

    def forward():
        copylib.twice(xs[0])  # two copies at once's line, a separate call each: a mask built twice a forward
        copylib.each(xs)  # one copy a tensor, all on one call path

    counts, repeats = _count(forward)
    at = forward.__code__.co_firstlineno
    twice, each = (f"copylib.py:{line}, called from {HERE}:{at + n}" for line, n in ((3, 1), (7, 2)))
    assert repeats == {twice: 1, each: 4}, repeats
    found = host_syncs(counts, sampled=[0], sites=5, repeats=repeats, min_per_step=2)
    assert [(s.where, s.value) for s in found] == [(each, 4)], found
    assert "inside copylib, 4 on one call path" in found[0].detail, found[0]
    fix = found[0].suggestion
    assert (
        "copylib's own" in fix and f"what {HERE}:{at + 2} passes" in fix and "pip install -U copylib" in fix
    ), fix
    everything = host_syncs(counts, sampled=[0], sites=5, repeats=repeats, min_per_step=1)
    assert [(s.where, s.value) for s in everything] == [(each, 4), (twice, 2)], everything


def test_the_users_own_copy_a_step_is_named_whatever_min_per_step_says():
    counts, repeats = _count(lambda: torch.ones(1).sum().item())
    found = host_syncs(counts, sampled=[0], sites=5, repeats=repeats, min_per_step=10)
    assert [(s.value, s.suggestion.startswith("keep the value on the device")) for s in found] == [(1, True)]


def test_min_per_step_is_checked_at_the_door(make_config):
    for bad in (0, -1, 0.5):
        with pytest.raises(ConfigError, match=r"^perf.symptoms.host_sync.min_per_step=.*: must be >= 1"):
            validate(make_config(f"perf.symptoms.host_sync.min_per_step={bad}"))
    validate(make_config("perf.symptoms.host_sync.min_per_step=1.5"))
    assert HostSync(min_per_step=1.5).min_per_step == 1.5


# --- model=hf copies nothing, and computes what transformers computes --------------------------------------------

ARCHS = ["llama", "gpt2", "mistral", "qwen2", "gemma2"]  # gemma2: the architecture picks eager


@pytest.mark.parametrize("arch", ARCHS)
def test_model_hf_makes_no_copy_and_the_logits_transformers_own_call_gives(arch):
    torch.manual_seed(0)
    model = HFCausalLM(40, arch=arch, max_len=12, d_model=32, layers=2, heads=4)
    ids = torch.randint(0, 40, (3, 12))
    counts, _ = _count(lambda: model(ids).sum().backward())
    assert not counts, f"transformers {importlib.import_module('transformers').__version__}: {dict(counts)}"
    logits = model(ids)
    if model.lm.config._attn_implementation == CAUSAL_SDPA:
        model.lm.set_attn_implementation("sdpa")
    plain = model.lm(
        input_ids=ids, use_cache=False
    ).logits  # transformers' own masks, built as it builds them
    gap = (logits - plain).abs()
    assert torch.equal(logits, plain), f"{arch}: max gap {gap.max():.3g}, mean {gap.mean():.3g}"


def test_model_hf_keeps_the_mask_a_window_needs_and_its_copy_is_transformers():
    model = HFCausalLM(40, arch="mistral", max_len=12, d_model=32, heads=4, config={"sliding_window": 4})
    assert model.lm.config._attn_implementation == "sdpa"  # the window narrows attention: its mask is built
    counts, _ = _count(lambda: model(torch.zeros(1, 12, dtype=torch.long)))
    [(_, where, call)] = counts
    assert where.startswith("transformers/masking_utils.py:") and call == "__bool__", counts
    assert where.split(", called from ")[1].startswith("harness/models/hf_causal_lm.py:"), where


# --- train.py runs ---------------------------------------------------------------------------------------------


def _run(tmp_path, data_root, *overrides: str, env: dict | None = None) -> tuple[dict, list[dict], str]:
    result = train(*overrides, cwd=tmp_path, data_root=data_root, env={**FORK, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    found = [s for s in verdict["symptoms"] if s["name"] == "host_sync"]
    return verdict, found, (tmp_path / "run" / "train.log").read_text()


@pytest.mark.slow  # ~8 s a run: the default overfit pipeline, preflight included
@pytest.mark.parametrize(
    "overrides",
    [("model.arch=llama",), ("model.arch=gpt2",), ("model.arch=mistral",), ("model.arch=qwen2",)]
    + [("model.arch=llama", "mode=full", "mode.max_steps=12", "mode.val_every=6")],
    ids=["llama", "gpt2", "mistral", "qwen2", "llama-full"],
)
def test_correct_hugging_face_models_raise_no_host_sync(overrides, tmp_path, data_root):
    verdict, found, log = _run(tmp_path, data_root, "model=hf", "model.d_model=32", *overrides)
    assert found == [], found
    assert "host_sync: steps [3, 7] watched, no copy" in log
    rows = {c["name"]: c["status"] for c in verdict["checks"]}
    assert rows.get("causality") == rows.get("batch_independence") == "PASS", rows


QUICK = ("mode=full", "mode.max_steps=10", "preflight=false", *PROBES_OFF)


@pytest.mark.slow  # ~5 s a run: 10 steps, no preflight
@pytest.mark.parametrize(
    ("overrides", "marker", "per_step", "kind"),
    [
        (
            ("model._target_=tests.perf.test_host_sync_weighed.MaskEveryLayer",),
            "a mask index a layer",
            3,
            "t[mask]",
        ),
        (
            ("model._target_=tests.perf.test_host_sync_weighed.TensorEveryStep",),
            "a tensor made each step",
            1,
            "tensor",
        ),
        (
            ("loss._target_=tests.perf.test_host_sync_weighed.FiniteCheckedLoss",),
            "a bool a step",
            1,
            "bool(t)",
        ),
    ],
    ids=["mask-a-layer", "tensor-a-step", "bool-a-step-in-the-loss"],
)
def test_a_planted_copy_is_named_with_its_line_and_count(
    overrides, marker, per_step, kind, tmp_path, data_root
):
    _, found, _ = _run(tmp_path, data_root, "model=rnn", "model.layers=3", *QUICK, *overrides)
    assert [(s["where"], s["value"]) for s in found] == [(f"{HERE}:{_planted(marker)}", per_step)], found
    assert kind in found[0]["detail"] and found[0]["suggestion"].startswith("keep the value on the device")


@pytest.mark.slow  # ~6 s a run
@pytest.mark.parametrize("each_layer", [False, True], ids=["one-copy-a-forward", "a-copy-a-layer"])
def test_a_forks_own_transformers_wrapper_is_named_only_where_the_library_copies_a_layer(
    each_layer, library, tmp_path, data_root
):
    model = ("model=rnn", "model._target_=tests.perf.test_host_sync_weighed.ForkLlama", "~model.vectorize")
    extra = (f"+model.each_layer={each_layer}", "model.d_model=32", "model.layers=2")
    env = {"PYTHONPATH": f"{library}{os.pathsep}{FORK['PYTHONPATH']}"}
    _, found, log = _run(tmp_path, data_root, *model, *extra, *QUICK, env=env)
    if not each_layer:  # transformers' one check a forward, called from the fork's line: left out, and said
        assert found == [], found
        assert "transformers/masking_utils.py:" in log and f"called from {HERE}:" in log, log[-2000:]
        return
    asked = f"copylib.py:7, called from {HERE}:{_planted('a library copy a layer')}"
    assert [(s["where"], s["value"]) for s in found] == [(asked, 3)], found
    assert "copylib's own" in found[0]["suggestion"], found[0]
