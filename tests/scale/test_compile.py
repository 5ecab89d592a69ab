"""torch.compile: an overfit run keeps its probes and checks, the training step runs the compiled graph while
checkpoints stay plain, and the inductor backend passes."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import PROBES_OFF, needs_probes

# --- torch.compile ----------------------------------------------------------------------------------------------


@needs_probes
@pytest.mark.slow  # a whole train.py run of its own (two DDP processes, or compiling)
def test_compiled_overfit_keeps_probes_and_checks(run_train, tmp_path):
    """compile with the aot_eager backend (traced by dynamo and AOTAutograd, no C code generated: seconds)."""
    result = run_train("mode=overfit", "n=2", "compile=aot_eager", "data.length=12")
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "PASS", verdict
    assert {c["name"] for c in verdict["checks"]} >= {"gradient_flow", "causality", "batch_independence"}
    assert all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]
    assert verdict["grad_by_position"] and verdict["dead_params"] == []
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert "grad_norm/token_embedding.weight" in header, "parameter names changed under compile"
    assert (tmp_path / "run" / "datapoints.jsonl").read_text()


@pytest.mark.slow  # torch.compile traces the model: seconds
def test_training_step_runs_the_compiled_graph_and_checkpoints_stay_plain(tmp_path):
    import pytorch_lightning as pl
    from torch._dynamo.utils import counters
    from torch.utils.data import DataLoader

    from harness.models import Transformer
    from harness.train.module import HarnessModule

    ids = torch.tensor([1, 2, 3, 4])
    batch = {"input_ids": ids, "targets": ids.roll(-1), "loss_mask": torch.ones(4, dtype=torch.bool)}
    # a transformer: dynamo does not trace nn.RNN / nn.LSTM (it falls back to eager around them)
    module = HarnessModule(
        Transformer(vocab_size=6, max_len=4, d_model=8, layers=1, heads=2), compile="aot_eager"
    )
    torch._dynamo.reset()
    counters.clear()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, DataLoader([batch], batch_size=1))
    assert counters["stats"]["unique_graphs"] >= 1, "the training step never went through torch.compile"
    assert not [k for k in module.state_dict() if "_orig_mod" in k]
    assert isinstance(module.model.token_embedding, torch.nn.Embedding)


@pytest.mark.slow
def test_inductor_compile_overfit_passes(run_train, tmp_path):
    """compile=true: inductor, which writes and compiles C++ on CPU (about 40 s here)."""
    result = run_train("mode=overfit", "n=2", "compile=true", "data.length=12", *PROBES_OFF, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["status"] == "PASS"
