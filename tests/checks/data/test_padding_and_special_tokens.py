"""Padding taken alike from both sides of the data round trip (right, left, by <eos>, -100 targets), and the
special_tokens check called directly on the fork pipelines of tests/forks/data/ and the built-in sources (the
preflight's tests hold it too): a BOS doubled, an end of text never learned, documents that never end."""

from __future__ import annotations

import pytest

from harness import checks
from harness.checks.data.roundtrip_causes import padding_of
from harness.checks.data.special_tokens import special_tokens
from harness.data import SyntheticDataModule, TextDataModule
from tests.checks.data.planted_rows import CAUGHT, DETAIL, LENGTHS, _Fixed, config
from tests.forks.data import BUGGY, CORRECT, NoEosLM, SpacedTokenizer, build

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
