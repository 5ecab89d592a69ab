"""Tokenizer, on-disk format and loaders: round trips, atomic writes, corruption."""

from __future__ import annotations

import json
import multiprocessing
import random

import pytest
import torch

from harness.data import CharTokenizer, SyntheticDataModule, TextDataModule
from harness.data.format import CorruptDataset, is_complete, read_split, write_dataset
from harness.data.sources.synthetic import generate
from harness.data.sources.text import builtin_corpus
from harness.errors import ConfigError


def test_tokenizer_round_trip_over_its_alphabet():
    tok = CharTokenizer("ab\ncdé ")
    rng = random.Random(0)
    for length in (0, 1, 5, 100):
        text = "".join(rng.choice(tok.alphabet) for _ in range(length))
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("ba") == [1, 0]


def test_tokenizer_names_an_unknown_character():
    with pytest.raises(ValueError, match=r"'z' at position 2"):
        CharTokenizer("abc").encode("abz")
    with pytest.raises(ValueError, match="repeats"):
        CharTokenizer("aba")


def test_format_round_trip(tmp_path):
    splits = {"train": [{"text": "abc", "label": "1"}], "val": [{"text": "cab", "label": "0"}]}
    write_dataset(tmp_path / "d", splits, task="classify", alphabet="abc01", length=3, source={})
    assert read_split(tmp_path / "d", "train") == splits["train"]
    assert read_split(tmp_path / "d", "val") == splits["val"]


def test_truncated_dataset_is_detected_and_regenerated(tmp_path):
    dm = SyntheticDataModule(length=8, size=20, val_size=5, root=str(tmp_path))
    dm.prepare_data()
    original = (dm.dataset_dir / "train.jsonl").read_text()
    (dm.dataset_dir / "train.jsonl").write_text(original[: len(original) // 2])
    assert not is_complete(dm.dataset_dir)
    with pytest.raises(CorruptDataset, match="checksum"):
        read_split(dm.dataset_dir, "train")
    dm.prepare_data()
    assert (dm.dataset_dir / "train.jsonl").read_text() == original


def _generate_into(root: str) -> None:
    SyntheticDataModule(length=64, size=3000, val_size=300, root=root, seed=7).prepare_data()


@pytest.mark.slow
def test_concurrent_generators_leave_one_whole_identical_dataset(tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_generate_into, args=(str(tmp_path),)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    folders = list((tmp_path / "synthetic").iterdir())
    assert len(folders) == 1, f"leftover staging folders: {folders}"
    assert is_complete(folders[0])
    expected = generate(64, 3300, "random", "abcdefghijklmnop", "0123", 7)
    assert read_split(folders[0], "train") + read_split(folders[0], "val") == expected


@pytest.mark.parametrize("rule", ["random", "first_token"])
def test_synthetic_loader_decodes_to_its_source(rule, tmp_path):
    dm = SyntheticDataModule(length=10, size=30, val_size=5, rule=rule, root=str(tmp_path))
    dm.prepare_data()
    dm.setup()
    source = read_split(dm.dataset_dir, "val")
    batch = next(iter(dm.val_dataloader()))
    for i, record in enumerate(source):
        assert dm.tokenizer.decode(batch["input_ids"][i].tolist()) == record["text"]
        assert dm.tokenizer.decode(batch["targets"][i][batch["loss_mask"][i]].tolist()) == record["label"]
        assert len(record["text"]) == 10
        if rule == "first_token":
            assert record["label"] == "0123"["abcdefghijklmnop".index(record["text"][0]) % 4]
    labels = {r["label"] for r in read_split(dm.dataset_dir, "train")}
    assert labels <= set("0123") and len(labels) > 1


def test_text_loader_reassembles_the_corpus(tmp_path):
    dm = TextDataModule(length=16, root=str(tmp_path))
    dm.prepare_data()
    dm.setup()
    corpus = builtin_corpus()
    pieces = []
    for batch in dm.val_dataloader():
        for ids, targets in zip(batch["input_ids"], batch["targets"], strict=True):
            pieces.append(dm.tokenizer.decode(ids.tolist()) + dm.tokenizer.decode(targets[-1:].tolist()))
    text = "".join(pieces)
    train_chars = len(dm.train_dataset) * 17
    assert text == corpus[train_chars : train_chars + len(text)]
    assert len(dm.val_dataset) == round((len(dm.train_dataset) + len(dm.val_dataset)) * 0.1)
    meta = json.loads((dm.dataset_dir / "meta.json").read_text())
    assert meta["task"] == "lm" and meta["alphabet"] == dm.tokenizer.alphabet


def test_text_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        TextDataModule(length=8, path=str(tmp_path / "missing.txt"), root=str(tmp_path))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ConfigError, match="empty"):
        TextDataModule(length=8, path=str(tmp_path / "empty.txt"), root=str(tmp_path))
    (tmp_path / "odd.txt").write_text("hello wörld " * 10)
    with pytest.raises(
        ConfigError,
        match=r"^data\.alphabet='helo wrd': the corpus \(.*odd\.txt\) holds characters outside it, 'ö'",
    ):
        TextDataModule(length=8, path=str(tmp_path / "odd.txt"), alphabet="helo wrd", root=str(tmp_path))
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00abc" * 10)
    with pytest.raises(ConfigError, match="not UTF-8"):
        TextDataModule(length=8, path=str(tmp_path / "binary.txt"), root=str(tmp_path))


def test_static_loader_gives_identical_batches(tmp_path):
    dm = SyntheticDataModule(length=6, size=12, val_size=8, batch_size=4, root=str(tmp_path))
    dm.prepare_data()
    dm.setup()
    first, second = list(dm.val_dataloader()), list(dm.val_dataloader())
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first, second, strict=True) for k in a)
