"""Probes: every output read back with the loggers' own readers (CSV, TensorBoard, W&B offline) from real tiny
runs, and checked against what it claims (cross-checked against another probe or the module's own metrics
where one exists); the dead-gradient sentinel; gradient by position; no host sync on a step that logs nothing."""

from __future__ import annotations

import json
import logging
import math
import struct
import sys
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from harness.probes.figures import grad_by_position_figure, legend_labels
from harness.probes.tokens.reach import reach
from harness.report.plots import UNDERFLOW
from harness.tasks.training import run
from tests.conftest import ROOT, compose_config
from tests.probes.conftest import _by_step, _rows

STEPS, LENGTH = 12, 16
TINY = ["preflight=false", f"mode.max_steps={STEPS}", f"data.length={LENGTH}", "model.d_model=16", "n=2"]
EVERY_5 = [
    "probes.histograms.every=5",
    "probes.datapoints.every=5",
    "probes.embeddings.every=5",
    "probes.grad_by_position.every=5",
    "probes.norms.ratio_every=1",
]
PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


def _run(tmp_path_factory, data_root, name: str, *overrides: str) -> tuple[Path, dict, object]:
    run_dir = tmp_path_factory.mktemp(name)
    cfg = compose_config([*TINY, *overrides], run_dir, data_root)
    return run_dir, run(cfg), cfg


@pytest.fixture(scope="module")
def tb_run(tmp_path_factory, data_root):
    """A tiny transformer overfit run, TensorBoard on, the periodic probes every 5 steps."""
    return _run(tmp_path_factory, data_root, "tb", "logger=tensorboard", *EVERY_5)


@pytest.fixture(scope="module")
def param_shapes(tb_run) -> dict[str, int]:
    _, _, cfg = tb_run
    model = instantiate(cfg.model, vocab_size=20)  # 16 letters + 4 labels, as the synthetic data's tokenizer
    return {name: p.numel() for name, p in model.named_parameters()}


def test_csv_has_every_parameter_every_step_and_the_numbers_agree(tb_run, param_shapes):
    run_dir, _, _ = tb_run
    rows = _rows(run_dir)
    total = _by_step(rows, "grad_norm/total")
    assert sorted(total) == list(range(STEPS))
    per_param = {name: _by_step(rows, f"grad_norm/{name}") for name in param_shapes}
    assert all(sorted(v) == list(range(STEPS)) for v in per_param.values()), "a parameter is missing a step"
    for step in range(STEPS):  # the total is the norm of the per-parameter norms
        assert total[step] == pytest.approx(
            math.sqrt(sum(v[step] ** 2 for v in per_param.values())), rel=1e-5
        )
    # the logit probe and the module's own train/p_correct read the same logits two ways
    assert _by_step(rows, "logit/p_correct") == pytest.approx(_by_step(rows, "train/p_correct"), rel=1e-5)
    p, top1, entropy = (_by_step(rows, f"logit/{k}") for k in ("p_correct", "top1", "entropy"))
    examples = [_by_step(rows, f"logit/p_correct/example_{i}") for i in range(2)]
    for step in range(STEPS):
        assert 0 < p[step] <= top1[step] <= 1 and 0 <= entropy[step] <= math.log(20)
        assert p[step] == pytest.approx((examples[0][step] + examples[1][step]) / 2, rel=1e-5)
    assert p[STEPS - 1] > p[0] and entropy[STEPS - 1] < entropy[0]  # memorizing: mass moves to the answer


def test_weight_norms_and_update_ratios_are_consistent(tb_run, param_shapes):
    rows = _rows(tb_run[0])
    for name in param_shapes:
        weight, ratio = _by_step(rows, f"weight_norm/{name}"), _by_step(rows, f"update_ratio/{name}")
        assert sorted(weight) == list(range(STEPS)) and sorted(ratio) == list(range(STEPS))
        for step in range(
            STEPS - 1
        ):  # ‖w_{s+1}‖ is within ‖Δw_s‖ = ratio_s * ‖w_s‖ of ‖w_s‖ (triangle inequality)
            if weight[step] > 0:
                delta = ratio[step] * weight[step]
                assert abs(weight[step + 1] - weight[step]) <= delta * (1 + 1e-4) + 1e-7, (name, step)
        assert any(r > 0 for s, r in ratio.items() if weight[s] > 0), f"{name} never moved"


def test_csv_summary_statistics_match_the_norms(tb_run, param_shapes):
    rows = _rows(tb_run[0])
    for name, numel in param_shapes.items():
        stats = {
            s: _by_step(rows, f"grad_stats/{name}/{s}") for s in ("min", "max", "mean", "std", "zero_frac")
        }
        assert sorted(stats["mean"]) == [0, 5, 10]
        norm = _by_step(rows, f"grad_norm/{name}")
        for step in (0, 5, 10):
            assert stats["min"][step] <= stats["mean"][step] <= stats["max"][step]
            assert 0 <= stats["zero_frac"][step] <= 1
            # Σx² = (n - 1) std² + n mean²: the histogram probe against the norm probe
            squares = (numel - 1) * stats["std"][step] ** 2 + numel * stats["mean"][step] ** 2
            assert math.sqrt(squares) == pytest.approx(norm[step], rel=1e-3, abs=1e-7), (name, step)
        assert sorted(_by_step(rows, f"weight_stats/{name}/std")) == [0, 5, 10]


def test_tensorboard_event_files_hold_scalars_histograms_text_and_images(tb_run, param_shapes):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _, _ = tb_run
    events = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0, "images": 0, "tensors": 0}
    )
    events.Reload()
    tags = events.Tags()
    csv_total = _by_step(_rows(run_dir), "grad_norm/total")
    tb_total = {e.step: e.value for e in events.Scalars("grad_norm/total")}
    assert tb_total == pytest.approx(csv_total, rel=1e-6)
    for name, numel in param_shapes.items():
        assert f"weight_norm/{name}" in tags["scalars"]
        for kind in ("grad", "weight"):
            histograms = events.Histograms(f"{kind}_hist/{name}")
            assert [h.step for h in histograms] == [0, 5, 10]
            assert all(h.histogram_value.num == numel for h in histograms)
        first = events.Histograms(f"grad_hist/{name}")[0].histogram_value
        assert first.min == pytest.approx(_by_step(_rows(run_dir), f"grad_stats/{name}/min")[0], rel=1e-6)
    assert {"embeddings", "grad_by_position", "logit/p_correct_per_example"} <= set(tags["images"])
    text = events.Tensors("datapoints/text_summary")
    assert [t.step for t in text] == [0, 5, 10, STEPS]
    assert "| input | target | prediction |" in text[0].tensor_proto.string_val[0].decode()


def test_run_dir_has_the_plots_and_decoded_datapoints(tb_run):
    run_dir, _, cfg = tb_run
    for name in ("p_correct.png", "embeddings.png", "grad_by_position.png"):
        assert (run_dir / name).read_bytes()[:8] == PNG, name
    rows = [json.loads(line) for line in (run_dir / "datapoints.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in rows}) == [0, 5, 10, STEPS]
    data = instantiate(cfg.data)
    data.prepare_data()
    data.setup("fit")
    for row in rows:
        record = data.train_dataset.record(row["index"])
        assert row["split"] == "train"  # overfit mode validates on the training examples: shown once
        assert row["input"] == record["text"]
        assert row["target"] == "·" * (LENGTH - 1) + record["label"]  # only the last position is asked for
        assert row["prediction"][:-1] == "·" * (LENGTH - 1) and len(row["prediction"]) == LENGTH
    final, first = ([r["loss"] for r in rows if r["step"] == s] for s in (STEPS, 0))
    assert sum(final) < sum(first)


def test_verdict_holds_the_contract(tb_run):
    _, verdict, _ = tb_run
    profile = verdict["grad_by_position"]
    assert set(profile) == {"init", "final"} and len(profile["init"]) == len(profile["final"]) == LENGTH
    assert all(isinstance(v, float) for v in profile["init"] + profile["final"])
    assert verdict["reach_init"] == reach(profile["init"]) and verdict["reach_final"] == reach(
        profile["final"]
    )
    assert verdict["inputs_identical"] is True and verdict["dead_params"] == []
    assert set(_by_step(_rows(Path(verdict["run_dir"])), "reseed/same_as_first").values()) == {1.0}


def _wandb_records(path: Path):
    """The records of a .wandb file (LevelDB log format: 32 KiB blocks of checksum, length, type, data)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunk = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B", "not a .wandb file"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record


@pytest.mark.slow  # a wandb offline run (test_trackers reads one back in make test)
def test_wandb_offline_run_holds_the_probes_and_wandb_watch(tmp_path_factory, data_root, param_shapes):
    run_dir, _, _ = _run(
        tmp_path_factory, data_root, "wandb", "logger=wandb", "probes.wandb_watch=true", *EVERY_5
    )
    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    history = []
    for record in _wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            history.append(
                {
                    "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    steps = {row["trainer/global_step"] for row in history if "grad_norm/total" in row}
    assert steps == set(range(STEPS))
    logged = {key for row in history for key in row}
    assert {f"grad_norm/{name}" for name in param_shapes} <= logged
    name = next(iter(param_shapes))  # nested values come back one leaf a key: grad_hist/<name>/_type
    assert {row[f"grad_hist/{name}/_type"] for row in history if f"grad_hist/{name}/_type" in row} == {
        "histogram"
    }
    assert {row["datapoints/_type"] for row in history if "datapoints/_type" in row} == {"table-file"}
    assert {row["embeddings/_type"] for row in history if "embeddings/_type" in row} == {"image-file"}
    table = json.loads(
        sorted((path.parent / "files" / "media" / "table").glob("datapoints_*.json"))[0].read_text()
    )
    first = json.loads((run_dir / "datapoints.jsonl").read_text().splitlines()[0])
    assert table["columns"] == list(first) and table["data"][0] == list(first.values())
    assert any(key.startswith("gradients/") for key in logged), "wandb.watch logged no gradients"
    assert list((path.parent / "files" / "media").rglob("*.png")), "no image files in the wandb run"


@pytest.fixture(scope="module")
def rnn_run(tmp_path_factory, data_root):
    """A tanh RNN, every probe every 3 steps and a 3-step sentinel, with every host read made from a probe
    recorded (tolist, item, cpu, numpy, bool, float) with the step it was made in."""
    reads: list[tuple[str, int]] = []
    probes_dir = str(ROOT / "src" / "harness" / "probes")

    def recording(method):
        def wrapper(self, *args, **kwargs):
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(probes_dir):
                frame = caller
                while frame is not None and "trainer" not in frame.f_locals:
                    frame = frame.f_back
                if frame is not None:
                    step = frame.f_locals["trainer"].global_step
                    hook = frame.f_code.co_name
                    reads.append((hook, step - 1 if hook == "on_train_batch_end" else step))
            return method(self, *args, **kwargs)

        return wrapper

    every_3 = [
        f"probes.{p}.every=3"
        for p in (
            "norms",
            "dead",
            "histograms",
            "logits",
            "datapoints",
            "embeddings",
            "grad_by_position",
            "reseed",
            "activations",
            "symptoms",
        )
    ]
    with pytest.MonkeyPatch.context() as patch:
        for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__float__"):
            patch.setattr(torch.Tensor, name, recording(getattr(torch.Tensor, name)))
        result = _run(
            tmp_path_factory,
            data_root,
            "rnn",
            "model=rnn",
            "data.length=24",
            "mode.max_steps=7",
            "probes.dead.patience=3",
            "probes.norms.ratio_every=3",
            "probes.plots=false",
            *every_3,
        )
    return (*result, reads)


def test_no_host_read_on_a_step_that_logs_nothing(rnn_run):
    run_dir, _, _, reads = rnn_run
    in_steps = {step for hook, step in reads if hook.startswith(("on_train_batch", "on_before_optimizer"))}
    assert in_steps == {0, 3, 6}, sorted(reads)
    assert sorted(_by_step(_rows(run_dir), "grad_norm/total")) == [0, 3, 6]


def test_gradient_by_position_decays_in_the_rnn_not_in_the_transformer(rnn_run, tb_run):
    rnn = rnn_run[1]["grad_by_position"]["init"]
    transformer = tb_run[1]["grad_by_position"]["init"]
    assert rnn[-2] > rnn[len(rnn) // 2] > rnn[0] and rnn_run[1]["reach_init"] < 1e-3, rnn
    assert tb_run[1]["reach_init"] > 0.1, transformer
    assert min(transformer[:-1]) > 0.1 * max(transformer[:-1]), transformer  # flat up to the last position


def test_gradient_plot_draws_an_underflow_as_such():
    assert UNDERFLOW in legend_labels(grad_by_position_figure({"init": [0.0, 1e-30, 1e-3, 1.0]}))
    assert UNDERFLOW not in legend_labels(grad_by_position_figure({"init": [1e-30, 1e-3, 1.0]}))


def test_sentinel_names_unused_and_frozen_parameters_once(tmp_path_factory, data_root, caplog):
    caplog.set_level(logging.WARNING, logger="harness.probes")
    run_dir, verdict, _ = _run(
        tmp_path_factory,
        data_root,
        "unused",
        "model=rnn",
        "probes.plots=false",
        "model._target_=tests.forks.models.UnusedParamRNN",
    )
    assert sorted(verdict["dead_params"]) == ["head.bias", "unused"]
    warnings = [r.getMessage() for r in caplog.records if "dead gradient" in r.getMessage()]
    assert (
        len(warnings) == 2
        and any("unused" in w for w in warnings)
        and any("head.bias" in w for w in warnings)
    )
    rows = _rows(run_dir)
    assert set(_by_step(rows, "grad_norm/missing").values()) == {2.0}  # reported, not dropped
    assert set(_by_step(rows, "grad_norm/unused").values()) == {0.0}


def test_sentinel_is_silent_on_the_built_in_models(tb_run, rnn_run, tmp_path_factory, data_root, caplog):
    caplog.set_level(logging.WARNING, logger="harness.probes")
    _, lstm, _ = _run(
        tmp_path_factory,
        data_root,
        "lstm",
        "model=lstm",
        "mode.max_steps=6",
        "probes.dead.patience=3",
        "probes.plots=false",
    )
    for verdict in (tb_run[1], rnn_run[1], lstm):  # patience 10 over 12 steps, and 3 over 6 / 7
        assert verdict["dead_params"] == [], verdict["model"]
    assert not [r for r in caplog.records if "dead gradient" in r.getMessage()]


def test_probes_off_logs_none_of_it(tmp_path_factory, data_root):
    run_dir, verdict, _ = _run(tmp_path_factory, data_root, "off", "probes=off", "mode.max_steps=3")
    header = set(_rows(run_dir)[0])
    assert "train/loss" in header and not any(k.startswith(("grad_norm/", "logit/")) for k in header)
    assert not {"grad_by_position", "dead_params", "inputs_identical"} & set(verdict)
    assert not list(run_dir.glob("*.png")) and not (run_dir / "datapoints.jsonl").exists()
