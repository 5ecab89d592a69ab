"""The data side of the preflight on a fork's own DataModules (tests/forks/data/): every planted data-pipeline
mistake fails in the one row that names its cause, the model checks neither fail nor echo it, and every correct
pipeline (padded, classification, a sharded stream, real text, the built-in sources) raises nothing, in the
preflight and through the real train.py."""

from __future__ import annotations

import pytest
import torch

from harness import checks
from harness.data import SyntheticDataModule, TextDataModule
from harness.report.verdict import read_verdict
from tests.checks.data.planted_rows import (
    CAUGHT,
    DETAIL,
    ECHOES,
    LENGTHS,
    MODEL_ROWS,
    UNRUNNABLE,
    _Fixed,
    config,
    preflight,
)
from tests.conftest import TESTS_CONF, sampled
from tests.forks.data import BUGGY, CORRECT, build


def test_every_planted_data_mistake_is_listed():
    assert set(CAUGHT) == set(BUGGY)


@pytest.mark.parametrize("name", sampled(sorted(BUGGY)))
def test_each_data_mistake_fails_in_the_row_that_names_it(name):
    length = LENGTHS.get(name, 16)
    rows = preflight(build(BUGGY[name], length=length), length)
    row, words = CAUGHT[name]
    assert rows[row]["status"] == checks.FAIL, rows[row]
    assert all(w in rows[row]["detail"] for w in words), rows[row]["detail"]
    failed = {n for n, r in rows.items() if r["status"] == checks.FAIL}
    echoes = ECHOES.get(name, {})
    assert failed <= {row, *echoes}, {n: rows[n]["detail"] for n in failed}
    for echo, pointer in echoes.items():
        assert rows[echo]["status"] != checks.FAIL or pointer in rows[echo]["detail"], rows[echo]
    assert not MODEL_ROWS & failed, "a data mistake blamed on the model"
    if name in UNRUNNABLE:  # said once, in its own row: the model rows point at it, none crashes or echoes it
        assert all(
            rows[n]["status"] == checks.SKIP and UNRUNNABLE[name] in rows[n]["detail"] for n in MODEL_ROWS
        )
    assert all(len(r["detail"]) <= DETAIL for r in rows.values()), max(
        rows.values(), key=lambda r: len(r["detail"])
    )


@pytest.mark.parametrize("name", sampled(sorted(CORRECT)))
def test_correct_fork_pipelines_raise_nothing(name):
    length = LENGTHS.get(name, 16)
    rows = preflight(build(CORRECT[name], length=length), length)
    assert all(r["status"] == checks.PASS for r in rows.values()), {
        n: r for n, r in rows.items() if r["status"] != checks.PASS
    }


@pytest.mark.parametrize("length", [1, 4, 32])
def test_builtin_synthetic_data_raises_nothing(length, tmp_path):
    """A tiny length repeats examples across the splits by chance, as often as within training: no overlap."""
    data = SyntheticDataModule(length=length, root=str(tmp_path))
    data.prepare_data()
    data.setup()
    rows = preflight(data, length)
    assert all(r["status"] == checks.PASS for r in rows.values()), rows


def test_builtin_text_raises_nothing(tmp_path):
    """The built-in corpus repeats some passages (11% of its short chunks recur across the splits): real text."""
    data = TextDataModule(length=16, root=str(tmp_path))
    data.prepare_data()
    data.setup()
    rows = preflight(data, 16)
    assert all(r["status"] == checks.PASS for r in rows.values()), rows


def test_ids_in_range_names_key_id_position_and_size():
    data = build(CORRECT["FixedClassification"])
    vocab = data.tokenizer.vocab_size
    first = next(iter(data.train_dataloader()))
    first["targets"][2, -1] = vocab  # a label past the vocabulary, inside the mask
    result = checks.ids_in_range(None, _Fixed(data, first), config(16))
    assert result.status == checks.FAIL
    for words in (
        "key 'targets'",
        "example 2",
        f"position {first['targets'].shape[1] - 1}",
        f"id {vocab}",
        f"{vocab} ids",
    ):
        assert words in result.detail, result.detail


def test_a_target_outside_the_mask_may_be_anything():
    """-100 (Hugging Face's ignore index) or a pad id past the vocabulary, where the mask leaves it out."""
    data = build(CORRECT["FixedClassification"])
    first = next(iter(data.train_dataloader()))
    first["targets"][~first["loss_mask"]] = -100
    assert checks.ids_in_range(None, _Fixed(data, first), config(16)).status == checks.PASS
    loss = checks.model.passes.masked_loss(
        torch.zeros(*first["targets"].shape, data.tokenizer.vocab_size), first
    )
    assert torch.isfinite(loss)


def test_a_stream_wrapped_by_its_loader_is_read_through_the_datamodule_dataset():
    """The loader's dataset is a shuffle buffer without record(i): the round trip reads train_dataset's."""
    data = build(CORRECT["StreamingLM"])
    assert not hasattr(data.train_dataloader().dataset, "record")
    result = checks.data_roundtrip(None, data, config(16))
    assert result.status == checks.PASS and "decode back" in result.detail, result


def test_split_overlap_is_judged_beyond_what_training_repeats_of_itself():
    """A share of validation found in training that training repeats of itself anyway is no leak."""
    data = build(CORRECT["FixedClassification"])
    result = checks.split_overlap(None, data, config(16))
    assert result.status == checks.PASS and "0% of validation" in result.detail, result
    leaked = build(BUGGY["ValSliceOfTrain"])
    assert checks.split_overlap(None, leaked, config(16)).status == checks.FAIL


# ---------------------------------------------------------------------------------------------------------
# through the real train.py: a fork's datamodule plugged in by its config (tests/conf/data/fork.yaml)
# ---------------------------------------------------------------------------------------------------------

FORK = (f"hydra.searchpath=[file://{TESTS_CONF}]", "data=fork", "probes=off")


@pytest.mark.slow
def test_overfit_mode_preflight_reads_the_forks_own_loaders(run_train, tmp_path):
    """Overfit mode trains on its own batch of n examples; the preflight still reads the fork's loaders."""
    result = run_train(*FORK, "data._target_=tests.forks.data.buggy.SameBatchSampler", "mode=overfit", "n=2")
    assert result.returncode == 3, result.stderr[-2000:]
    rows = {c["name"]: c for c in read_verdict(tmp_path / "run")["checks"]}
    assert rows["train_loader"]["status"] == checks.FAIL, rows["train_loader"]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("PaddedLM", marks=pytest.mark.slow),
        pytest.param("StreamingLM", marks=pytest.mark.slow),
        pytest.param("PaddedClassification", marks=pytest.mark.slow),
    ],
)
def test_a_correct_fork_pipeline_overfits_with_its_own_collate(name, run_train, tmp_path):
    """Padded examples of several lengths batch only through the fork's collate; a stream has no index."""
    result = run_train(*FORK, f"data._target_=tests.forks.data.correct.{name}", "mode=overfit", "n=2")
    assert result.returncode == 0, result.stderr[-2000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "PASS" and all(c["status"] == checks.PASS for c in verdict["checks"]), verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", ["PaddedLM", "StreamingLM"])
def test_a_correct_fork_pipeline_trains_in_full_mode(name, run_train, tmp_path):
    result = run_train(
        *FORK,
        f"data._target_=tests.forks.data.correct.{name}",
        "mode=full",
        "mode.max_steps=30",
        "mode.val_every=10",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "DONE" and verdict["val_loss"] is not None, verdict


@pytest.mark.slow
@pytest.mark.parametrize(
    "tokenizer", [{"kind": "char"}, {"kind": "bpe", "vocab_size": 512}], ids=["char", "bpe"]
)
def test_a_corpus_of_real_text_raises_nothing(tokenizer, tmp_path):
    """CPython's own library source, 2 MB of it: code repeats itself, and nothing of that is a leak."""
    from harness.data import CorpusDataModule

    data = CorpusDataModule(
        length=128, files="stdlib", tokenizer=tokenizer, max_bytes=2_000_000, root=str(tmp_path)
    )
    data.prepare_data()
    data.setup()
    rows = preflight(data, 128)
    assert all(r["status"] == checks.PASS for r in rows.values()), rows
