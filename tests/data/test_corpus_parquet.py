"""data=corpus on .parquet files (a nanochat-style folder of shards): each row's text column a document,
tokenized exactly as the same documents in .jsonl; bad Parquet refused in one line. Real files (pyarrow)."""

from __future__ import annotations

import json
import random
import sys

import pytest

from harness.data import shards
from harness.data.sources.corpus import Corpus
from harness.data.tokenizer import END_OF_TEXT
from harness.errors import ConfigError
from tests.data.conftest import BPE, code_like, datamodule, ready
from tests.data.test_corpus import overfits_passing_every_check

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write_parquet(path, texts, row_group_size=3, **columns):
    """`texts` as the `text` column of a Parquet file (row groups of 3), beside `id` and `columns`."""
    table = pa.table({"id": list(range(len(texts))), "text": texts, **columns})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@pytest.fixture
def parquet_folder(tmp_path):
    """Three Parquet shards (nanochat's layout: shard_00000.parquet, ...); their documents, in order."""
    rng, folder = random.Random(5), tmp_path / "shards"
    folder.mkdir()
    docs = []
    for i, rows in enumerate((7, 1, 10)):
        texts = [code_like(rng, rng.randint(1, 8)) for _ in range(rows)]
        texts[0] = texts[0] if i else ""  # an empty document too: <|endoftext|> alone, as in .jsonl
        write_parquet(folder / f"shard_{i:05d}.parquet", texts)
        docs += texts
    return folder, docs


def stream(dm) -> list[int]:
    """The prepared corpus's whole token stream, through the shards' reader."""
    meta = json.loads((dm.dataset_dir / "meta.json").read_text())
    store = shards.TokenStore(dm.dataset_dir, meta)
    return store.read(0, len(store)).tolist()


@pytest.mark.parametrize("workers", [1, 2])
def test_parquet_shards_tokenize_as_the_same_documents_in_jsonl(
    parquet_folder, tmp_path, monkeypatch, workers
):
    """Rows are documents as .jsonl records are: the same BPE, the same tokens, each document followed by
    <|endoftext|>; with two workers each shard is its own task (the BPE trained before they fork)."""
    folder, docs = parquet_folder
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for path in sorted(folder.iterdir()):
        texts = pq.read_table(path, columns=["text"]).column("text").to_pylist()
        lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
        (jsonl / path.with_suffix(".jsonl").name).write_text(lines, encoding="utf-8")
    monkeypatch.setattr(shards, "TASK_BYTES", (100, 400))  # a task a file: a pool of workers for workers=2
    made = [ready(datamodule(f, tmp_path / "data", BPE, workers=workers)) for f in (folder, jsonl)]
    assert len(shards.plan(made[0].corpus.files, workers)) == 3
    assert made[0].tokenizer.fingerprint() == made[1].tokenizer.fingerprint()
    tokens = stream(made[0])
    assert tokens == stream(made[1])
    assert made[0].tokenizer.decode(tokens) == "".join(d + END_OF_TEXT for d in docs)


def test_a_file_a_glob_and_a_mixed_folder_are_read(parquet_folder, tmp_path):
    """One .parquet file, a glob of them, and a folder of .parquet beside .txt (in name order)."""
    folder, docs = parquet_folder
    one = Corpus(16, files=str(folder / "shard_00001.parquet"), root=str(tmp_path / "data"))
    glob = Corpus(16, files=f"{folder}/*.parquet", root=str(tmp_path / "data"))
    assert [p for p, _ in one.files] == [str(folder / "shard_00001.parquet")]
    assert [p for p, _ in glob.files] == [str(p) for p in sorted(folder.iterdir())]
    (folder / "a.txt").write_text("plain text\n", encoding="utf-8")
    (folder / "z.md").write_text("# the last\n", encoding="utf-8")
    dm = ready(datamodule(folder, tmp_path / "data", BPE, length=8))
    expected = ["plain text\n", *docs, "# the last\n"]
    assert dm.tokenizer.decode(stream(dm)) == "".join(d + END_OF_TEXT for d in expected)


def test_another_text_field_is_prepared_again(tmp_path):
    """data.text_field is in the corpus's key: another column is another corpus, read from that column."""
    texts = [code_like(random.Random(i), 4) for i in range(6)]
    path = write_parquet(tmp_path / "two.parquet", texts, body=[t.upper() for t in texts])
    by_text = ready(datamodule(path, tmp_path / "data", BPE, length=8))
    by_body = ready(datamodule(path, tmp_path / "data", BPE, length=8, text_field="body"))
    assert by_text.corpus.corpus_dir != by_body.corpus.corpus_dir
    assert by_body.tokenizer.decode(stream(by_body)) == "".join(t.upper() + END_OF_TEXT for t in texts)


def damaged_page(path):
    """A real Parquet file whose text column's first page header is overwritten: its footer reads, its rows do
    not; and where that page starts."""
    data = bytearray(write_parquet(path, ["some text\n"] * 5).read_bytes())
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # the text column's, in the first row group
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start : start + 24] = b"\x07" * 24
    path.write_bytes(bytes(data))
    return path, start


def test_bad_parquet_is_refused_in_one_line(tmp_path, monkeypatch):
    """At the door (the footer): no text column (its columns listed), a column of numbers, no Parquet, a
    truncated file; while tokenizing: a damaged page, a null row; pyarrow missing: the extra to install."""
    root, bad = tmp_path / "data", tmp_path / "bad"
    bad.mkdir()
    good = write_parquet(bad / "good.parquet", ["fine\n"] * 4, body=["x"] * 4)
    (bad / "fake.parquet").write_text("text, not Parquet\n")
    (bad / "cut.parquet").write_bytes(good.read_bytes()[:-20])
    page, start = damaged_page(bad / "page.parquet")
    fix = r"set data\.text_field=text \(a column of strings\)$"
    cases = [
        (good, {"text_field": "content"}, r"has no 'content' column \(it has: id, text, body\); " + fix),
        (good, {"text_field": "id"}, r"its 'id' column holds int64, not text \(strings\); " + fix),
        (bad / "fake.parquet", {}, r"is not a Parquet file, or is damaged \(.*\); write or download it"),
        (bad / "cut.parquet", {}, r"is not a Parquet file, or is damaged"),
        (page, {}, rf"row group 0 cannot be read as Parquet \(.*\) at byte {start}; write or download it"),
        (write_parquet(bad / "null.parquet", ["a", None]), {}, r"the 'text' column is null in row 1 at byte"),
    ]  # fmt: skip
    for path, keys, pattern in cases:
        with pytest.raises(ConfigError, match=rf"^data\.files={path}: {pattern}") as err:
            ready(datamodule(path, root, length=2, **keys))
        assert "\n" not in str(err.value)
    assert not [p for p in root.rglob("*") if p.suffix == ".bin"]
    for module in ("pyarrow", "pyarrow.parquet"):  # as where the datasets extra is not installed
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(
        ConfigError, match=rf"^data\.files={good}: .*pyarrow is not installed.*'\.\[datasets\]'"
    ):
        datamodule(good, root)


def test_overfit_run_on_parquet_shards_with_bpe_passes_every_check(parquet_folder, make_config, one_thread):
    overfits_passing_every_check(make_config, parquet_folder[0])
