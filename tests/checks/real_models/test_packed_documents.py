"""Packed documents (a batch's optional `document_ids`): attention that crosses them FAILs `document_isolation`,
named by document and position, in minGPT-style code, Hugging Face Llama and x-transformers as written; a model
that masks by document passes; a batch that declares no documents claims nothing."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from harness import checks
from harness.checks import FAIL, PASS
from tests.conftest import ROOT, run_command
from tests.forks import real_models as rm
from tests.forks.data import build
from tests.forks.data.packed import DeclaredPackedLM, document_ids

pytestmark = pytest.mark.usefixtures("one_thread")

CFG = {"seed": 0}


@pytest.fixture(scope="module")
def packed():
    return build(DeclaredPackedLM, length=32)


def first_batch(data) -> dict:
    batch = next(iter(data.train_dataloader()))
    assert (batch["document_ids"].amax(dim=1) >= 1).all(), "every row holds two documents or more"
    return batch


def made(make, data) -> torch.nn.Module:
    torch.manual_seed(0)
    return make(data.tokenizer.vocab_size, data.length)


@pytest.mark.parametrize(
    "make",
    [
        lambda vocab, length: rm.MiniGPT(vocab, max_len=length),
        lambda vocab, length: rm.hf(vocab, "llama", length),
        lambda vocab, length: rm.XDecoder(vocab, max_len=length),
    ],
    ids=["minigpt", "hf-llama", "x-transformers"],
)
def test_attention_across_declared_documents_fails_naming_them(make, packed):
    result = checks.document_isolation(made(make, packed), first_batch(packed), CFG)
    assert result.status == FAIL, result
    assert "moves the outputs of document(s)" in result.detail and "mask it by document" in result.detail


def test_a_model_that_masks_by_document_passes_and_no_declaration_claims_nothing(packed):
    eos = packed.tokenizer.eos_id
    model = made(lambda vocab, length: rm.DocumentMaskedMiniGPT(vocab, eos_id=eos, max_len=length), packed)
    batch = first_batch(packed)
    result = checks.document_isolation(model, batch, CFG)
    assert result.status == PASS and "moves no other document's outputs" in result.detail, result
    plain = {k: v for k, v in batch.items() if k != "document_ids"}
    crossing = made(lambda vocab, length: rm.MiniGPT(vocab, max_len=length), packed)
    undeclared = checks.document_isolation(crossing, plain, CFG)
    assert undeclared.status == PASS and undeclared.detail.startswith("not judged"), undeclared


def test_document_ids_count_documents_from_zero_an_end_belongs_to_its_document():
    ids = torch.tensor([[5, 6, 0, 7, 0, 0, 8]])
    assert document_ids(ids, eos_id=0).tolist() == [[0, 0, 0, 1, 1, 2, 3]]


def test_document_ids_of_another_shape_are_refused_in_the_row(packed):
    batch = dict(first_batch(packed))
    batch["document_ids"] = batch["document_ids"][:, :-1]
    result = checks.document_isolation(made(lambda v, n: rm.MiniGPT(v, max_len=n), packed), batch, CFG)
    assert result.status == FAIL and "shaped as input_ids" in result.detail, result


@pytest.mark.parametrize(
    ("model", "code", "status"),
    [
        (["model._target_=tests.forks.real_models.minigpt.MiniGPT"], 3, "PREFLIGHT_FAIL"),
        (
            ["model._target_=tests.forks.real_models.minigpt_bugs.DocumentMaskedMiniGPT", "+model.eos_id=0"],
            0,
            "PASS",
        ),
    ],
    ids=["crossing", "masked"],
)
def test_train_py_on_packed_documents(model, code, status, tmp_path):
    """The real command on a fork's packed datamodule: attention across its documents stops the run before
    training (exit 3, the row says why); the same data with a model that masks by document trains to PASS."""
    run_dir = tmp_path / "run"
    result = run_command(
        sys.executable,
        str(ROOT / "train.py"),
        f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]",
        "data=fork",
        "data._target_=tests.forks.data.packed.DeclaredPackedLM",
        "data.length=32",
        "model=transformer",
        *model,
        "mode=overfit",
        "n=2",
        "probes=off",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
    )
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert result.returncode == code and verdict["status"] == status, result.stderr[-3000:]
    [row] = [c for c in verdict["checks"] if c["name"] == "document_isolation"]
    assert row["status"] == (FAIL if code else PASS), row
    assert all(c["status"] == PASS for c in verdict["checks"] if c["name"] != "document_isolation"), verdict[
        "checks"
    ]
