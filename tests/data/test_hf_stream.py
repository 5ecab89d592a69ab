"""data=hf with streaming=true: nothing prepared, a loader that skips what a checkpoint trained on, and under
trainer=ddp ranks that read their own rows and a resumed run that continues where it stopped."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from harness.data import HFDataModule
from tests.conftest import PROBES_OFF, train
from tests.data.test_hf import BPE, jsonl, pairs, texts

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def streamed(tmp_path, path, length: int = 16, num_workers: int = 0, **keys) -> HFDataModule:
    data = HFDataModule(
        length=length, path=str(path), tokenizer=BPE, root=str(tmp_path / "data"), batch_size=4,
        num_workers=num_workers, streaming=True, **keys,
    )  # fmt: skip
    data.prepare_data()
    data.setup()
    return data


def batches(loader, count: int) -> list[torch.Tensor]:
    out = []
    for batch in loader:
        out.append(batch["input_ids"])
        if len(out) == count:
            return out
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stream_resumed_skips_the_batches_trained_on(tmp_path, num_workers):
    for shard in range(2):  # two files: each worker streams its own
        pq.write_table(pa.table({"text": texts(60, seed=shard)}), tmp_path / f"part-{shard}.parquet")
    data = streamed(tmp_path, tmp_path / "*.parquet", num_workers=num_workers)
    assert not list((tmp_path / "data" / "hf").glob("*/*/tokens"))  # nothing prepared: only the BPE
    straight = batches(data.train_dataloader(), 7)
    resumed_loader = data.train_dataloader()
    resumed_loader.load_state_dict({"batches": 3})
    resumed = batches(resumed_loader, 4)
    if num_workers == 0:
        assert all(torch.equal(a, b) for a, b in zip(straight[3:], resumed, strict=True))
    else:  # the loader takes from worker 0 first again: the same batches, each round of workers in its order
        assert sorted(b.tolist() for b in straight[3:]) == sorted(b.tolist() for b in resumed)
    assert not any(torch.equal(a, b) for a in straight[:3] for b in resumed)  # none trained on twice


def test_a_streamed_fine_tuning_set_learns_the_responses_only(tmp_path):
    rows = pairs()
    data = streamed(
        tmp_path, jsonl(tmp_path / "pairs.jsonl", rows), prompt_field="prompt", response_field="response"
    )
    eos = data.tokenizer.decode([data.tokenizer.eos_id])
    held = round(len(rows) * 0.1)  # the stream's first rows validate
    batch = next(iter(data.train_dataloader()))
    assert len(batch["targets"]) == 4
    for row, targets, mask in zip(rows[held:], batch["targets"], batch["loss_mask"], strict=False):
        assert data.tokenizer.decode(targets[mask].tolist()) == row["response"] + eos
    assert data.val_dataset.record(0) == {
        "text": rows[0]["prompt"] + "\n",
        "label": rows[0]["response"] + eos,
    }


@pytest.mark.slow  # three runs of two processes, ~20 s each
def test_ranks_stream_their_own_rows_and_a_resumed_run_continues_where_it_stopped(tmp_path, data_root):
    pq.write_table(pa.table({"text": texts(200)}), tmp_path / "train.parquet")
    common = [
        "data=hf", f"data.path={tmp_path / 'train.parquet'}", "data.streaming=true", "data.length=32",
        "data.batch_size=4", f"data.root={tmp_path / 'data'}", "mode=full", "trainer=ddp", "mode.log_every=1",
        "mode.val_every=4", "mode.ckpt_every=4", "schedule=constant", "mode.progress_bar=false", *PROBES_OFF,
    ]  # fmt: skip
    losses = {}
    for name, extra in (
        ("straight", ["mode.max_steps=8"]),
        ("first", ["mode.max_steps=4", "preflight=false"]),
        (
            "resumed",
            [
                "mode.max_steps=8",
                "preflight=false",
                f"ckpt_path={tmp_path / 'first/run/checkpoints/last.ckpt'}",
            ],
        ),
    ):
        (tmp_path / name).mkdir()
        result = train(*common, *extra, cwd=tmp_path / name, data_root=data_root)
        assert result.returncode == 0, result.stderr[-3000:]
        with (tmp_path / name / "run" / "metrics.csv").open() as f:
            losses[name] = {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r["train/loss"]}
        if name == "straight":
            checks = {
                c["name"]: c
                for c in json.loads((tmp_path / name / "run" / "verdict.json").read_text())["checks"]
            }
            assert checks["rank_data"]["status"] == "PASS", checks["rank_data"]
    assert sorted(losses["resumed"]) == [4, 5, 6, 7]
    assert {s: losses["straight"][s] for s in range(4, 8)} == losses["resumed"], losses


def test_a_streamed_run_trains_and_its_checkpoint_evaluates(tmp_path, make_config, one_thread):
    """mode=full on a stream, then mode=eval of its checkpoint: measured on the validation rows read once; no
    unigram entropy (the training tokens of a stream are never all at hand)."""
    from omegaconf import OmegaConf

    from harness.tasks.job import perform
    from harness.tasks.training import run

    pq.write_table(pa.table({"text": texts(80)}), tmp_path / "train.parquet")
    run_dir = tmp_path / "trained"
    cfg = make_config(
        "mode=full", "data=hf", f"data.path={tmp_path / 'train.parquet'}", "data.streaming=true",
        f"data.root={tmp_path / 'data'}", "data.length=16", "tokenizer.vocab_size=300", "model.d_model=32",
        "model.layers=1", "model.heads=2", "mode.max_steps=3", "mode.val_every=3", "preflight=false", *PROBES_OFF,
        run_dir=run_dir,
    )  # fmt: skip
    trained = run(cfg)
    assert trained["status"] == "DONE" and trained["steps"] == 3, trained
    (run_dir / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, run_dir / ".hydra" / "config.yaml")
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    evaluated = perform(
        make_config(
            "mode=eval",
            f"ckpt_path={checkpoint}",
            "mode.samples=1",
            "mode.new_tokens=2",
            run_dir=tmp_path / "eval",
        )
    )
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert evaluated["status"] == "DONE" and report["loss"] == pytest.approx(trained["val_loss"], rel=1e-5)
    assert "unigram_entropy" not in report
