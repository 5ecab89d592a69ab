"""The tokenizer contract (harness.data.tokenizer): char, a byte-level BPE trained here, a tokenizer.json loaded
offline; round trips, special tokens, fingerprints; and the `tokenizer` config group reaching data=corpus."""

from __future__ import annotations

import random

import pytest
from hydra.utils import instantiate

from harness.data.tokenizer import (
    END_OF_TEXT,
    CharTokenizer,
    HFTokenizer,
    from_spec,
    load_hf,
    tokenizer_config,
    train_bpe,
)
from harness.errors import ConfigError

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.\n",
    "naïve café, 東京, emoji 🎉🐍, العربية\n",
    "    for i in range(10):\n        print(i)\n",
] * 20


def random_unicode(rng: random.Random, length: int) -> str:
    """Any code points but surrogates (which no UTF-8 string can hold): controls, combining marks, CJK, emoji."""
    ranges = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(length))


@pytest.fixture(scope="module")
def bpe() -> HFTokenizer:
    return train_bpe(iter(TEXTS), vocab_size=300)


def test_char_round_trips_and_has_no_special_tokens():
    tok = CharTokenizer("ab\ncdé ")
    text = "".join(random.Random(0).choice(tok.alphabet) for _ in range(200))
    assert tok.decode(tok.encode(text)) == text
    assert tok.bos_id is None and tok.eos_id is None
    assert (
        tok.fingerprint()
        == CharTokenizer("ab\ncdé ").fingerprint()
        != CharTokenizer("ba\ncdé ").fingerprint()
    )
    assert from_spec(tok.spec()).fingerprint() == tok.fingerprint()


def test_byte_level_bpe_round_trips_arbitrary_unicode(bpe):
    rng = random.Random(0)
    for length in (0, 1, 7, 100, 1000):
        text = random_unicode(rng, length)
        assert bpe.decode(bpe.encode(text)) == text, (length, text[:40])
    awkward = ["  leading", "trailing \n\n", "\r\n\t\x00", "e\u0301", END_OF_TEXT + " inside", "\U0010ffff"]
    for text in awkward:
        assert bpe.decode(bpe.encode(text)) == text, text
    assert max(bpe.encode("".join(TEXTS))) < bpe.vocab_size <= 300
    assert len(bpe.encode("def add(a, b):")) < len("def add(a, b):"), "the BPE merged nothing"


def test_bpe_has_one_end_of_text_token_and_no_padding(bpe):
    eos = bpe.backend.token_to_id(END_OF_TEXT)
    assert bpe.eos_id == bpe.bos_id == eos == 0
    assert bpe.decode([*bpe.encode("a"), eos, *bpe.encode("b")]) == f"a{END_OF_TEXT}b"
    assert getattr(bpe, "pad_id", None) is None
    assert END_OF_TEXT not in bpe.decode(bpe.encode("plain text")), "encode added a special token"


def test_fingerprint_is_stable_and_tells_tokenizers_apart(bpe):
    again = from_spec(bpe.spec())
    assert again.fingerprint() == bpe.fingerprint() and again.eos_id == bpe.eos_id
    assert train_bpe(iter(TEXTS), vocab_size=280).fingerprint() != bpe.fingerprint()


def test_hf_loads_a_tokenizer_json_and_a_folder_offline(bpe, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bpe.save(tmp_path / "tokenizer.json")
    text = random_unicode(random.Random(1), 300)
    for path in (tmp_path / "tokenizer.json", tmp_path):  # the file, and the folder holding it
        tok = load_hf(str(path))
        assert tok.encode(text) == bpe.encode(text) and tok.decode(tok.encode(text)) == text
        assert tok.eos_id == bpe.eos_id and tok.fingerprint() == bpe.fingerprint()
    assert load_hf(str(tmp_path / "tokenizer.json"), eos_token=END_OF_TEXT).eos_id == 0


def test_hf_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^tokenizer\.path=.*missing\.json: no such file") as err:
        load_hf(str(tmp_path / "missing.json"))
    assert "\n" not in str(err.value)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer\.path=.*not a tokenizer\.json"):
        load_hf(str(tmp_path / "junk.json"))
    with pytest.raises(ConfigError, match=r"tokenizer\.path=None: required"):
        tokenizer_config({"kind": "hf", "path": None})


@pytest.mark.parametrize(
    ("node", "key"),
    [({"kind": "wordpiece"}, "tokenizer.kind"), ({"kind": "bpe", "vocab_size": 100}, "tokenizer.vocab_size")],
)
def test_tokenizer_config_refuses_bad_values(node, key):
    with pytest.raises(ConfigError, match=rf"^{key}="):
        tokenizer_config(node)


def test_tokenizer_group_reaches_corpus_data_as_plain_values(make_config, tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n" * 50)
    cfg = make_config(
        "data=corpus", f"data.files={tmp_path / 'a.txt'}", "tokenizer=bpe", "tokenizer.vocab_size=300"
    )
    assert cfg.tokenizer.kind == "bpe" and "_target_" not in cfg.tokenizer
    data = instantiate(cfg.data)  # Hydra hands the node over; nothing tries to instantiate it
    assert data.corpus.tokenizer_cfg == {"kind": "bpe", "vocab_size": 300}
    assert data.corpus.tokenizer_dir.name == "bpe300"
    # the other sources keep their own character tokenizer, whatever the group says
    synthetic = make_config("data=synthetic", "tokenizer=char")
    assert "tokenizer" not in synthetic.data and synthetic.tokenizer.kind == "char"
