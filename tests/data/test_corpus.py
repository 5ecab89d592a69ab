"""data=corpus: files tokenized once into shards (harness.data.prepare_corpus, .shards), read back as windows
(harness.data.sources.corpus). Real files in tmp dirs, real worker processes, the real CLI in a subprocess."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sys

import numpy as np
import pytest

from harness.data import integrity, shards
from harness.data import prepare_corpus as preparing
from harness.data.sampler import ResumableLoader
from harness.data.tokenizer import END_OF_TEXT, train_bpe
from harness.errors import ConfigError
from harness.tasks.training import run
from harness.train.overfit import Head
from tests.conftest import PROBES_OFF, ROOT, run_command
from tests.data.conftest import BPE, code_like, datamodule, ready


def test_shards_hold_the_corpus_token_for_token(corpus, tmp_path):
    """uint16 for a 4096 vocabulary; meta.json's counts and checksums are the shards'; and the stream decodes
    to the documents, each followed by <|endoftext|>, .jsonl records and .gz files included."""
    folder, docs = corpus
    dm = ready(datamodule(folder, tmp_path / "data", {"kind": "bpe", "vocab_size": 4096}))
    meta = json.loads((dm.dataset_dir / "meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["tokenizer"]["fingerprint"] == dm.tokenizer.fingerprint()
    stream = [np.fromfile(dm.dataset_dir / s["file"], dtype=np.uint16) for s in meta["shards"]]
    assert [len(s) for s in stream] == [s["tokens"] for s in meta["shards"]]
    assert sum(map(len, stream)) == meta["tokens"] == sum(p["tokens"] for p in meta["splits"].values())
    assert meta["splits"]["val"]["tokens"] == round(meta["tokens"] * 0.1)
    assert integrity.damage(dm.dataset_dir) is None
    assert dm.tokenizer.decode(np.concatenate(stream).tolist()) == "".join(d + END_OF_TEXT for d in docs)


def test_pieces_of_a_file_tokenize_as_the_whole_file(tmp_path):
    """A large file is cut into pieces for the workers; the pieces hold every byte, and the tokens are those
    of the whole file (cuts fall where GPT-2's pre-tokenizer splits anyway)."""
    text = code_like(random.Random(1), 3000)
    path = tmp_path / "big.py"
    path.write_text(text, encoding="utf-8")
    pieces = shards.split_file(str(path), path.stat().st_size, piece_bytes=4000)
    assert len(pieces) > 5 and pieces[-1].last and not pieces[0].last
    texts = [t for p in pieces for t, _ in shards.read_texts(p)]
    assert "".join(texts) == text
    bpe = train_bpe(iter([text]), 400)
    assert [i for t in texts for i in bpe.encode(t)] == bpe.encode(text)
    records = [{"text": line, "n": i} for i, line in enumerate(text.splitlines())]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    pieces = shards.split_file(str(path), path.stat().st_size, piece_bytes=4000)
    assert len(pieces) > 5 and [t for p in pieces for t, _ in shards.read_texts(p)] == [
        r["text"] for r in records
    ]


def test_bpe_is_trained_once_and_reused(corpus, tmp_path, monkeypatch):
    folder, _ = corpus
    first = ready(datamodule(folder, tmp_path / "data", BPE))
    trained = first.corpus.tokenizer_dir / "tokenizer.json"
    stamp = trained.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the BPE was trained again")

    monkeypatch.setattr(preparing, "train_bpe", no_training)
    other_split = ready(datamodule(folder, tmp_path / "data", BPE, val_fraction=0.2))  # new shards, same BPE
    assert other_split.dataset_dir != first.dataset_dir and trained.stat().st_mtime_ns == stamp
    assert other_split.tokenizer.fingerprint() == first.tokenizer.fingerprint()


def test_a_prepared_folder_is_reused_as_it_is(corpus, tmp_path, monkeypatch):
    folder, _ = corpus
    first = ready(datamodule(folder, tmp_path / "data"))
    monkeypatch.setattr(preparing, "_write_shards", lambda data: pytest.fail("prepared again"))
    second = ready(datamodule(folder, tmp_path / "data"))
    assert second.dataset_dir == first.dataset_dir
    assert all(second.train_dataset.record(i) == first.train_dataset.record(i) for i in range(5))


def test_training_windows_are_fixed_per_index_and_resume_bit_for_bit(corpus, tmp_path):
    folder, _ = corpus
    dm = ready(datamodule(folder, tmp_path / "data", BPE, seed=3))
    train, width = dm.train_dataset, dm.length + 1
    assert len(train) == dm.train_dataset.end // width
    again = ready(datamodule(folder, tmp_path / "data", BPE, seed=3)).train_dataset
    other_seed = ready(datamodule(folder, tmp_path / "data", BPE, seed=4)).train_dataset
    for i in range(len(train)):
        item = train[i]
        assert item["input_ids"].shape == (dm.length,) and item["loss_mask"].all()
        assert (item["targets"][:-1] == item["input_ids"][1:]).all()
        assert all((item[k] == again[i][k]).all() for k in item) and again.start(i) == train.start(i)
        assert train.start(i) + width <= train.end
        text = dm.tokenizer.decode([*item["input_ids"].tolist(), item["targets"][-1].item()])
        assert train.record(i) == {"text": text}
    assert [train.start(i) for i in range(8)] != [other_seed.start(i) for i in range(8)]
    head = Head(train, 2)  # overfit mode: the first n windows
    assert (head[1]["input_ids"] == train[1]["input_ids"]).all() and head.record(0) == train.record(0)

    loader = ResumableLoader(train, batch_size=4, seed=7, drop_last=True)
    whole_epoch = list(loader)
    loader.trained = (0, 3)  # checkpointed after 3 batches
    resumed = ResumableLoader(train, batch_size=4, seed=7, drop_last=True)
    resumed.load_state_dict(loader.state_dict())
    rest = list(resumed)
    assert len(rest) == len(whole_epoch) - 3
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(rest, whole_epoch[3:], strict=True))


def test_validation_windows_are_fixed_held_out_and_apart(corpus, tmp_path):
    folder, _ = corpus
    dm = ready(datamodule(folder, tmp_path / "data", val_windows=5))
    val, width = dm.val_dataset, dm.length + 1
    starts = [val.start(i) for i in range(len(val))]
    assert len(val) == 5 and starts[0] >= dm.train_dataset.end and starts[-1] + width <= val.end
    assert all(b - a >= width for a, b in zip(starts, starts[1:], strict=False)), starts
    batches = [list(dm.val_dataloader()) for _ in range(2)]
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(*batches, strict=True))
    assert len(ready(datamodule(folder, tmp_path / "data", val_windows=None)).val_dataset) == val.tiles


def _failing_encode(task, **kwargs):
    result = shards_encode(task, **kwargs)  # writes its shard, then the worker dies
    if task.index == 1:
        raise RuntimeError("worker killed")
    return result


shards_encode = shards.encode_task


def test_an_interrupted_prepare_leaves_nothing_that_looks_whole(corpus, tmp_path, monkeypatch):
    folder, _ = corpus
    monkeypatch.setattr(shards, "TASK_BYTES", (2000, 4000))  # several tasks: a pool of workers
    monkeypatch.setattr(shards, "encode_task", _failing_encode)
    dm = datamodule(folder, tmp_path / "data")
    assert len(shards.plan(dm.corpus.files, dm.corpus.workers)) > 2
    with pytest.raises(RuntimeError, match="worker killed"):
        dm.prepare_data()
    assert not dm.dataset_dir.exists() and list(dm.dataset_dir.parent.iterdir()) == []
    # a preparer killed outright leaves its temporary folder: the next one clears it and prepares
    (dm.dataset_dir.parent / f".{dm.dataset_dir.name}.crashed").mkdir()
    monkeypatch.setattr(shards, "encode_task", shards_encode)
    ready(dm)
    assert [p.name for p in dm.dataset_dir.parent.iterdir()] == [dm.dataset_dir.name]


def _prepare_in_process(files: str, root: str) -> None:
    datamodule(files, root).prepare_data()


def test_two_processes_preparing_at_once_leave_one_whole_folder(corpus, tmp_path):
    folder, _ = corpus
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_prepare_in_process, args=(str(folder), str(tmp_path / "data")))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    dm = datamodule(folder, tmp_path / "data")
    assert [p.name for p in dm.dataset_dir.parent.iterdir()] == [dm.dataset_dir.name]
    assert integrity.damage(dm.dataset_dir) is None


def test_bad_inputs_are_one_line_config_errors_and_leave_nothing(corpus, tmp_path, monkeypatch):
    folder, _ = corpus
    root = tmp_path / "data"
    cases = [
        (lambda: datamodule(folder / "missing.txt", root), r"^data\.files=.*missing\.txt: no such file"),
        (
            lambda: datamodule(folder / "*.nothing", root),
            r"^data\.files=.*\*\.nothing: the glob matches no file",
        ),
        (
            lambda: ready(datamodule(folder / "a.py", root, length=100_000)),
            r"^data\.length=100000: the corpus holds",
        ),
    ]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.txt").write_text("fine text\n" * 50)
    (bad / "b.txt").write_bytes(b"good start\n" * 3 + b"then \xff bad\n")
    cases.append(
        (lambda: ready(datamodule(bad, root, BPE)), r"^data\.files=.*b\.txt: not UTF-8 text .* at byte 38;")
    )
    for make, pattern in cases:
        with pytest.raises(ConfigError, match=pattern) as err:
            make()
        assert "\n" not in str(err.value)
    monkeypatch.setattr(shards, "TASK_BYTES", (100, 400))  # the same error from inside a worker process
    with pytest.raises(ConfigError, match=r"b\.txt: not UTF-8 text .* at byte 38;"):
        ready(datamodule(bad, root))
    assert not [p for p in root.rglob("*") if p.name.startswith(("val", ".val")) or p.suffix == ".bin"]


def test_a_tokenizer_unlike_the_shards_is_refused(corpus, tmp_path):
    folder, docs = corpus
    path = tmp_path / "tokenizer.json"
    train_bpe(iter(docs), 300).save(path)
    hf = {"kind": "hf", "path": str(path)}
    ready(datamodule(folder, tmp_path / "data", hf))
    train_bpe(iter(docs), 280).save(path)  # the file changes under the prepared shards
    with pytest.raises(ConfigError, match=r"^tokenizer\.path=.*not the one the shards in .* were made with"):
        ready(datamodule(folder, tmp_path / "data", hf))


@pytest.mark.slow  # ~10 s: a fresh interpreter that imports torch and Lightning
def test_prepare_cli_exits_2_with_one_error_line_on_an_empty_glob(tmp_path):
    """`python -m harness.cli.prepare` on a glob that matches nothing: one line, exit 2, nothing written."""
    result = run_command(
        sys.executable, "-m", "harness.cli.prepare", "data=corpus", f"data.files={tmp_path}/*.txt",
        f"data.root={tmp_path / 'data'}", cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: data.files={tmp_path}/*.txt: the glob matches no file; check the pattern"], (
        lines
    )
    assert not (tmp_path / "data").exists()


def overfits_passing_every_check(make_config, files) -> None:
    """An overfit run of a small transformer on the corpus of `files` with a BPE: PASS, every check PASS."""
    cfg = make_config(
        "model=transformer", "data=corpus", f"data.files={files}", "tokenizer=bpe", "tokenizer.vocab_size=300",
        "data.length=16", "mode=overfit", "n=2", *PROBES_OFF,
    )  # fmt: skip
    verdict = run(cfg)
    assert verdict["status"] == "PASS", verdict
    assert verdict["checks"] and all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]
    assert os.path.isdir(cfg.data.root)


def test_overfit_run_on_a_corpus_with_bpe_passes_every_check(corpus, make_config, one_thread):
    overfits_passing_every_check(make_config, corpus[0])
