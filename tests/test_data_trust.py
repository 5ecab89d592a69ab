"""The data side of the preflight on a fork's own DataModules (tests/fork_data.py): every planted data-pipeline
mistake fails in the one row that names its cause, the model checks neither fail nor echo it, and every correct
pipeline (padded, classification, a sharded stream, real text, the built-in sources) raises nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from harness import checks
from harness.checks.data.roundtrip_causes import padding_of
from harness.checks.data.special_tokens import special_tokens
from harness.checks.preflight import run_preflight
from harness.data import SyntheticDataModule, TextDataModule
from harness.models.transformer import Transformer
from harness.report.verdict import read_verdict
from harness.train.module import HarnessModule
from tests.conftest import sampled
from tests.fork_data import BUGGY, CORRECT, NoEosLM, SpacedTokenizer, build

#: planted mistake -> (the row that fails, words its detail must hold: the cause named)
CAUGHT = {
    "PadCountedLM": ("loss_mask", ["counts padding", "pad id"]),
    "PadCountedFromInputsLM": ("loss_mask", ["counts padding", "pad id"]),
    "EosPaddedLM": ("loss_mask", ["counts padding", "end-of-text"]),
    "ValIsTrain": ("split_overlap", ["train_dataset itself"]),
    "ValSliceOfTrain": ("split_overlap", ["100%", "training examples too"]),
    "OverlappingWindowsLM": ("split_overlap", ["inside training text"]),
    "SameBatchSampler": ("train_loader", ["identical", "same indices"]),
    "IgnoresIndexDataset": ("train_loader", ["identical", "ignores its index"]),
    "LabelFirstClassification": ("loss_mask", ["position 0", "read 1 of its"]),
    "LabelOffByOneClassification": (
        "loss_mask",
        ["the label is predicted at position", "whole text has been read"],
    ),
    "UnshardedStreamingLM": ("train_loader", ["the workers read the same examples", "get_worker_info"]),
    "EosEqualsVocabSize": ("ids_in_range", ["eos_id", "vocab_size"]),
    "TargetsAreInputsLM": ("data_roundtrip", ["the inputs themselves"]),
    "ShiftedByTwoLM": ("data_roundtrip", ["shifted by 2"]),
    "LabelInInputClassification": ("data_roundtrip", ["label is inside the input"]),
    "TimeMajorCollate": ("batch_format", ["time-major"]),
    "OtherVocabularyOrder": ("data_roundtrip", ["another vocabulary"]),
    "EmptyLossMask": ("loss_mask", ["False at every position"]),
    "MutatingValLoader": ("static_batches", ["differs between two passes"]),
    "EosNotLearnedLM": ("data_roundtrip", ["loss mask ends 1 position before", "never learned"]),
    "EmptyValLoader": ("batch_format", ["val loader hands out no batch", "drop_last"]),
    "Int32Targets": ("batch_format", ["torch.int32", ".long()"]),
    "PadCountedRecordsLM": ("loss_mask", ["counts padding", "pad id"]),
    "EosMaskedAsPadLM": (
        "special_tokens",
        ["key 'loss_mask'", "never learns to stop", "pad id is the eos id"],
    ),
    "DoubledBosLM": ("special_tokens", ["key 'input_ids'", "positions 0 and 1", "add_special_tokens=False"]),
    "EosSometimesLM": (
        "special_tokens",
        ["key 'targets'", "no end of text", "padded examples read end with one"],
    ),
}
#: rows that may fail beside the cause's own, each pointing back at it
ECHOES = {
    "IgnoresIndexDataset": {
        "data_roundtrip": "ignores its index"
    },  # its rows are one example: no source fits
    "TimeMajorCollate": {"data_roundtrip": "time-major"},
    "MutatingValLoader": {
        "ids_in_range": "negative"
    },  # a second read is out of the vocabulary: true, and said
    # re-seeded for every batch, so for every epoch too: the same order, true, and said
    "SameBatchSampler": {"epoch_order": "re-seeded alike every pass"},
    # the end of text out of the loss: the round trip sees the mask end early, special_tokens no eos ever learned
    "EosNotLearnedLM": {"special_tokens": "never learns to stop"},
    "EosMaskedAsPadLM": {"data_roundtrip": "never learned"},
}
#: mistakes that leave no batch a model can run: every model check is SKIP, pointing at the row that says why
UNRUNNABLE = {
    "EosEqualsVocabSize": "see ids_in_range",
    "EmptyLossMask": "see loss_mask",
    "Int32Targets": "see batch_format",
}
#: a length where the mistake shows (validation windows found at other offsets need long examples; every text padded),
#: or where a correct pipeline is most likely to raise a false alarm (max-length padding sharing long runs of pads, a
#: tiny vocabulary at a tiny length sharing examples by chance, a few documents cut short of the row, then padded)
LENGTHS = {
    "OverlappingWindowsLM": 128,
    "MaxLengthPaddedLM": 128,
    "TinyIIDLM": 2,
    "EosSometimesLM": 64,
    "CutThenPaddedLM": 36,
}
MODEL_ROWS = {check.__name__ for check in checks.MODEL_CHECKS}
#: the longest detail a row may print: a few positions and values, never whole tensors
DETAIL = 400


def config(length: int):
    return OmegaConf.create({"preflight": True, "seed": 0, "optim": {"lr": 3e-3}, "data": {"length": length}})


def preflight(data, length: int) -> dict[str, dict]:
    """The real preflight on a small transformer over `data`: its rows by name."""
    torch.manual_seed(0)
    model = Transformer(data.tokenizer.vocab_size, max_len=length, d_model=32, layers=1, heads=2)
    rows = run_preflight(HarnessModule(model), data, config(length))
    return {row["name"]: row for row in rows}


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


class _Fixed:
    """A datamodule whose loaders hand out one given batch: a planted value exactly where a test puts it."""

    def __init__(self, data, batch: dict):
        self.tokenizer, self.train_dataset, self.val_dataset = (
            data.tokenizer,
            data.train_dataset,
            data.val_dataset,
        )
        self.batch = batch

    def train_dataloader(self):
        return [self.batch]

    def val_dataloader(self):
        return [self.batch]


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
# padding alike on both sides of the round trip; special_tokens called directly (the preflight's tests hold it too)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["PaddedRecordsLM", "LeftPaddedRecordsLM", "EosPaddedRecordsLM", "HFEosPadLM"]
)
def test_records_that_hold_their_padding_decode_back_to_their_source(name):
    """record(i) is the whole row, padding and all (right, left, by <eos>, -100 targets); the row is read without."""
    data = build(CORRECT[name])
    texts = [data.train_dataset.record(i)["text"] for i in range(len(data.train_dataset))]
    assert any(t.endswith("<pad>") or t.startswith("<pad>") or t.endswith("<eos><eos>") for t in texts)
    result = checks.data_roundtrip(None, data, config(16))
    assert result.status == checks.PASS and "decode back" in result.detail, result


def test_padding_in_the_records_hides_no_mistake():
    """A pad counted in the loss fails loss_mask; an end of text masked with the padding, the round trip."""
    counted = checks.loss_mask(None, build(BUGGY["PadCountedRecordsLM"]), config(16))
    assert counted.status == checks.FAIL and "counts padding" in counted.detail, counted
    masked = checks.data_roundtrip(None, build(BUGGY["EosMaskedAsPadLM"]), config(16))
    assert masked.status == checks.FAIL and "never learned" in masked.detail, masked
    assert "<eos><eos>" not in masked.detail, masked.detail


def test_padding_is_cut_alike_from_a_row_and_its_source():
    """Pads go from either end (spaces between special tokens too); of a run of padding eos, the first stays."""
    spaced = padding_of(SpacedTokenizer(), {0})
    assert spaced.cut("[PAD] [PAD] [CLS] hi [SEP] [PAD] [PAD]") == "[CLS] hi [SEP]"
    assert spaced.cut("[CLS] hi [SEP]") == "[CLS] hi [SEP]"
    gpt2 = padding_of(build(CORRECT["EosIsPadLM"]).tokenizer, set())
    assert gpt2.cut("<eos><eos><bos>Hi.<eos><eos><eos>") == "<bos>Hi.<eos>"
    assert gpt2.cut("<bos>Hi.") == "<bos>Hi.", "an end of text dropped must stay visible"


@pytest.mark.parametrize("name", sorted(n for n, (row, _) in CAUGHT.items() if row == "special_tokens"))
def test_special_tokens_names_each_planted_mistake(name):
    length = LENGTHS.get(name, 16)
    result = special_tokens(None, build(BUGGY[name], length=length), config(length))
    assert result.status == checks.FAIL, result
    assert all(w in result.detail for w in CAUGHT[name][1]), result.detail
    assert "example" in result.detail and "position" in result.detail and len(result.detail) <= DETAIL


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_special_tokens_raises_nothing_on_correct_pipelines(name):
    """Documents cut short of the row, then padded (to a round size), are as long as the longest read: cut ones."""
    length = LENGTHS.get(name, 16)
    result = special_tokens(None, build(CORRECT[name], length=length), config(length))
    assert result.status == checks.PASS and (name != "CutThenPaddedLM" or "cut)" in result.detail), result


@pytest.mark.parametrize("source", [SyntheticDataModule, TextDataModule])
def test_special_tokens_on_builtin_sources_is_not_judged(source, tmp_path):
    """The char tokenizer has no special ids: nothing to judge, said."""
    data = source(length=16, root=str(tmp_path))
    data.prepare_data()
    data.setup()
    result = special_tokens(None, data, config(16))
    assert result.status == checks.PASS and "not judged" in result.detail, result


@pytest.mark.slow
def test_special_tokens_on_corpus_windows_expects_no_end_of_text(tmp_path):
    """Windows of a stream (GPT-2's one special token, BOS and EOS at once): none padded, no doubled BOS judged."""
    from harness.data import CorpusDataModule

    corpus = dict(files="stdlib", tokenizer={"kind": "bpe", "vocab_size": 512}, max_bytes=400_000)
    data = CorpusDataModule(length=64, root=str(tmp_path), **corpus)
    data.prepare_data()
    data.setup()
    result = special_tokens(None, data, config(64))
    assert result.status == checks.PASS, result
    assert "not judged" in result.detail and "none padded" in result.detail, result.detail


def test_padded_documents_without_any_end_of_text_warn():
    """No example ends, none holds an eos: the model never learns to stop, unless they are never meant to end."""
    result = special_tokens(None, build(NoEosLM), config(16))
    assert result.status == checks.WARN, result
    assert "none of the" in result.detail and "never learns to stop" in result.detail, result.detail


@pytest.mark.parametrize("name", ["LeftPaddedLM", "PaddedLM"], ids=["left-padded", "packed"])
def test_a_bos_doubled_inside_a_row_is_named_where_it_is(name):
    """A document starts after the left padding, or after an end of text where a second one is packed in the row."""
    data = build(CORRECT[name])
    first, tok = next(iter(data.val_dataloader())), data.tokenizer
    ids = first["input_ids"]
    if name == "LeftPaddedLM":
        row = int((ids[:, 0] == tok.pad_id).nonzero()[0])
        at = int((ids[row] != tok.pad_id).nonzero()[0])
    else:
        row, at = next((r, p + 1) for r, p in (ids == tok.eos_id).nonzero().tolist() if p + 3 < ids.shape[1])
    ids[row, at : at + 2] = tok.bos_id
    result = special_tokens(None, _Fixed(data, first), config(16))
    assert result.status == checks.FAIL, result
    assert f"example {row}" in result.detail and f"positions {at} and {at + 1}" in result.detail, result


def test_a_bos_that_is_also_the_eos_is_not_judged_doubled():
    """GPT-2's one special token begins and ends documents: two in a row are an end and a start, not a doubled BOS."""
    data = build(CORRECT["EosIsPadLM"])
    data.tokenizer.bos_id = data.tokenizer.eos_id
    first = next(iter(data.val_dataloader()))
    first["input_ids"][:, :2] = data.tokenizer.eos_id
    result = special_tokens(None, _Fixed(data, first), config(16))
    assert result.status == checks.PASS and "doubled bos not judged" in result.detail, result


def test_special_tokens_is_a_preflight_data_check():
    assert special_tokens in checks.DATA_CHECKS


# ---------------------------------------------------------------------------------------------------------
# through the real train.py: a fork's datamodule plugged in by its config (tests/conf/data/fork.yaml)
# ---------------------------------------------------------------------------------------------------------

FORK = (f"hydra.searchpath=[file://{Path(__file__).parent / 'conf'}]", "data=fork", "probes=off")


@pytest.mark.slow
def test_overfit_mode_preflight_reads_the_forks_own_loaders(run_train, tmp_path):
    """Overfit mode trains on its own batch of n examples; the preflight still reads the fork's loaders."""
    result = run_train(*FORK, "data._target_=tests.fork_data.SameBatchSampler", "mode=overfit", "n=2")
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
    result = run_train(*FORK, f"data._target_=tests.fork_data.{name}", "mode=overfit", "n=2")
    assert result.returncode == 0, result.stderr[-2000:]
    verdict = read_verdict(tmp_path / "run")
    assert verdict["status"] == "PASS" and all(c["status"] == checks.PASS for c in verdict["checks"]), verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", ["PaddedLM", "StreamingLM"])
def test_a_correct_fork_pipeline_trains_in_full_mode(name, run_train, tmp_path):
    result = run_train(
        *FORK, f"data._target_=tests.fork_data.{name}", "mode=full", "mode.max_steps=30", "mode.val_every=10"
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
