"""A BPE that comes out smaller than tokenizer.vocab_size asks (a corpus with too few pairs left to merge) says so:
one warning line while it is prepared, and meta.json's `vocab_size_asked` beside its `vocab_size`."""

from __future__ import annotations

import json

import pytest

from tests.data.conftest import datamodule, ready

#: a corpus of a few words: a few dozen merges at most, nowhere near 4096 tokens
TINY = "the cat sat on the mat\n" * 60


def _prepared(tmp_path, vocab_size: int, caplog):
    (tmp_path / "tiny.txt").write_text(TINY, encoding="utf-8")
    data = datamodule(
        tmp_path / "tiny.txt", tmp_path / "data", {"kind": "bpe", "vocab_size": vocab_size}, length=8
    )
    with caplog.at_level("INFO", logger="harness.data.prepare_corpus"):
        ready(data)
    meta = json.loads((data.dataset_dir / "meta.json").read_text())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    return data, meta, warnings


def test_a_corpus_too_small_for_the_size_asked_says_so(tmp_path, caplog):
    data, meta, warnings = _prepared(tmp_path, 4096, caplog)
    got = data.tokenizer.vocab_size
    assert 257 <= got < 4096
    assert meta["tokenizer"]["vocab_size"] == got and meta["tokenizer"]["vocab_size_asked"] == 4096, meta
    assert meta["tokenizer"]["config"] == {"kind": "bpe", "vocab_size": 4096}  # the keys it held before stay
    assert {"fingerprint", "bos_id", "eos_id", "alphabet"} <= set(meta["tokenizer"])
    assert warnings == [
        f"the corpus {data.corpus.corpus_dir.name} is too small for the BPE asked: tokenizer.vocab_size=4096 "
        f"asked, {got} tokens got (no pair left to merge); give a larger corpus or a smaller tokenizer.vocab_size"
    ], warnings


def test_a_bpe_of_the_size_asked_says_nothing(tmp_path, caplog):
    data, meta, warnings = _prepared(tmp_path, 260, caplog)
    assert (
        data.tokenizer.vocab_size
        == meta["tokenizer"]["vocab_size"]
        == meta["tokenizer"]["vocab_size_asked"]
        == 260
    )
    assert not warnings, warnings


def test_a_char_tokenizer_asks_for_no_size(tmp_path):
    (tmp_path / "tiny.txt").write_text(TINY, encoding="utf-8")
    data = ready(datamodule(tmp_path / "tiny.txt", tmp_path / "data", length=8))
    meta = json.loads((data.dataset_dir / "meta.json").read_text())
    assert meta["tokenizer"]["vocab_size"] == len(set(TINY)) and meta["tokenizer"]["vocab_size_asked"] is None


def test_a_hugging_face_dataset_s_meta_holds_both_sizes(tmp_path, caplog):
    pytest.importorskip("datasets")
    from harness.data import HFDataModule

    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"text": line}) + "\n" for line in TINY.splitlines())
    )
    data = HFDataModule(
        length=8,
        path=str(tmp_path / "rows.jsonl"),
        tokenizer={"kind": "bpe", "vocab_size": 4096},
        root=str(tmp_path / "data"),
        batch_size=4,
        num_proc=1,
    )
    with caplog.at_level("WARNING", logger="harness.data.prepare_corpus"):
        data.prepare_data()
    meta = json.loads((data.corpus.dataset_dir / "meta.json").read_text())["tokenizer"]
    assert meta["vocab_size_asked"] == 4096 and 257 <= meta["vocab_size"] < 4096, meta
    assert "too small for the BPE asked: tokenizer.vocab_size=4096 asked" in caplog.text, caplog.text
