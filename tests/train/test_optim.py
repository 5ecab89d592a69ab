"""The optim and schedule groups: parameter groups, the schedules' shapes, and what a run logs and applies."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from harness.errors import ConfigError
from harness.models import GPT, Transformer
from harness.tasks.training import run
from harness.train.optim import multiplier, parameter_groups, schedule
from tests.conftest import PROBES_OFF


def test_only_matrices_are_decayed():
    model = Transformer(vocab_size=11, max_len=8, d_model=16, layers=1, heads=2)
    decay, keep = parameter_groups(model)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in keep["params"]}
    assert keep["weight_decay"] == 0.0 and "weight_decay" not in decay
    assert "token_embedding.weight" in kept and "position_embedding.weight" in kept
    assert all(n.endswith("bias") or "norm" in n or "embedding" in n for n in kept), kept
    assert all(n.endswith("weight") and "norm" not in n and "embedding" not in n for n in decayed), decayed
    assert decayed | kept == set(names.values()) and not decayed & kept


def test_a_tied_head_counts_once_as_the_embedding():
    model = GPT(vocab_size=50, max_len=8, d_model=16, layers=1, heads=2)
    decay, keep = parameter_groups(model)
    every = [p for g in (decay, keep) for p in g["params"]]
    assert len(every) == len({id(p) for p in every}) == len(list(model.parameters()))
    assert any(p is model.token_embedding.weight for p in keep["params"])


def test_schedule_shapes():
    def at(step: int, shape: str) -> float:
        return multiplier(step, shape, warmup_steps=10, total_steps=110, floor=0.1)

    assert [at(s, "cosine") for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])  # the warmup
    assert at(10, "cosine") == pytest.approx(1.0) and at(60, "cosine") == pytest.approx(0.55)
    assert at(110, "cosine") == pytest.approx(0.1) and at(500, "cosine") == pytest.approx(0.1)
    assert at(35, "linear") == pytest.approx(1 - 0.9 * 0.25) and at(110, "linear") == pytest.approx(0.1)
    assert {at(s, "constant") for s in (10, 60, 500)} == {1.0}


def test_bad_schedule_values_name_the_key():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    for kwargs, key in (
        ({"shape": "step"}, "schedule.shape"),
        ({"warmup_steps": -1}, "schedule.warmup_steps"),
        ({"min_lr": 1.0}, "schedule.min_lr"),
    ):
        with pytest.raises(ConfigError) as err:
            schedule(optimizer, total_steps=10, **kwargs)
        assert str(err.value).startswith(f"{key}="), err.value


def logged(run_dir, key: str) -> dict[int, float]:
    with (run_dir / "metrics.csv").open() as f:
        return {int(r["step"]): float(r[key]) for r in csv.DictReader(f) if r.get(key)}


def test_a_full_run_follows_the_cosine_and_logs_lr(make_config, tmp_path):
    cfg = make_config(
        "mode=full",
        "mode.max_steps=12",
        "mode.log_every=1",
        "mode.val_every=12",
        "schedule.warmup_steps=4",
        "schedule.min_lr=3e-4",
        "data.length=8",
        "preflight=false",
        *PROBES_OFF,
    )
    assert cfg.schedule.shape == "cosine"  # mode=full's default
    verdict = run(cfg)
    assert verdict["status"] == "DONE"
    lr = logged(tmp_path / "run", "lr")  # the rate each step trained with
    assert lr == pytest.approx({s: 3e-3 * multiplier(s, "cosine", 4, 12, 0.1) for s in range(12)}, rel=1e-6)


def test_sgd_trains_and_an_optimizer_without_a_key_is_refused(make_config):
    verdict = run(make_config("optim=sgd", "optim.lr=0.5", "n=1", "data.length=8", *PROBES_OFF))
    assert verdict["status"] == "PASS", verdict
    with pytest.raises(ConfigError) as err:
        run(make_config("optim._target_=torch.optim.RMSprop", "n=1", "data.length=8", *PROBES_OFF))
    assert str(err.value).startswith("optim.betas="), err.value


@pytest.mark.skipif(not PROBES_OFF, reason="the pre-clip norm is the norms probe's grad_norm/total")
def test_clipping_applies_and_the_logged_norm_is_before_it(make_config, tmp_path):
    """Same seed, same first gradient: the logged norm is the same with and without clipping (it is read
    before the clip), and the clipped run trains differently."""
    common = ("n=2", "data.length=8", "mode.max_steps=4", "mode.target_loss=0", "preflight=false")
    runs = {}
    for name, clip in (("plain", "null"), ("clipped", "0.01")):
        run(make_config(*common, f"trainer.gradient_clip_val={clip}", run_dir=tmp_path / name))
        runs[name] = (logged(tmp_path / name, "grad_norm/total"), logged(tmp_path / name, "train/loss"))
    (norm, loss), (clipped_norm, clipped_loss) = runs["plain"], runs["clipped"]
    first = min(norm)
    assert norm[first] == pytest.approx(clipped_norm[first], rel=1e-6) and norm[first] > 0.01
    last = max(loss)
    assert not math.isclose(loss[last], clipped_loss[last], rel_tol=1e-4), (loss, clipped_loss)


def test_bf16_mixed_clips_the_fused_default_s_gradients(make_config, tmp_path):
    """Lightning refuses to clip for a fused optimizer under mixed precision (fp16's loss scale); bf16 has none:
    the run clips, and a clip this tight trains otherwise than no clip."""
    common = ("n=2", "data.length=8", "mode.max_steps=4", "mode.target_loss=0", "preflight=false")
    losses = {}
    for name, clip in (("plain", "null"), ("clipped", "0.01")):
        verdict = run(
            make_config(
                *common,
                "trainer.precision=bf16-mixed",
                f"trainer.gradient_clip_val={clip}",
                run_dir=tmp_path / name,
            )
        )
        assert verdict["status"] == "FAIL" and verdict["steps"] == 4, verdict  # trained all 4 steps
        losses[name] = logged(tmp_path / name, "train/loss")
    last = max(losses["plain"])
    assert not math.isclose(losses["plain"][last], losses["clipped"][last], rel_tol=1e-3), losses


def test_accumulation_takes_the_trainer_key(make_config):
    cfg = make_config(
        "mode=full",
        "mode.max_steps=3",
        "mode.val_every=3",
        "data.length=8",
        "data.batch_size=4",
        "+trainer.accumulate_grad_batches=2",
        "preflight=false",
        *PROBES_OFF,
    )
    verdict = run(cfg)
    assert verdict["status"] == "DONE" and verdict["steps"] == 3, verdict
