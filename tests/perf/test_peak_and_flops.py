"""What an MFU is read against and counted from: the GPU table matched on device names, the dtype a precision runs
in, a CPU's measured peak cached once per machine, the FLOP count against a hand count, and the phases' clock."""

from __future__ import annotations

import json
import time

import pytest
import pytorch_lightning as pl
import torch

from harness.train.perf.flops import batch_flops
from harness.train.perf.peak import cpu_model, device_peak, measured_peak, precision_dtype, table_peak
from harness.train.perf.timeline import PHASES, Timeline, Wrapped

#: torch.cuda.get_device_name() as these cards report it -> (dtype, the datasheet's dense peak, its row)
NAMES = [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12, "H100 SXM"),
    ("NVIDIA H100 PCIe", "bf16", 756e12, "H100 PCIe"),
    ("NVIDIA H100 NVL", "fp16", 835.5e12, "H100 NVL"),
    ("NVIDIA H200", "bf16", 989.5e12, "H200 SXM"),
    ("NVIDIA H200 NVL", "tf32", 417.5e12, "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156e12, "A100"),
    ("NVIDIA A100 80GB PCIe", "bf16", 312e12, "A100"),
    ("NVIDIA L40S", "bf16", 362.05e12, "L40S"),
    ("NVIDIA L4", "bf16", 121e12, "L4"),
    ("NVIDIA A10G", "bf16", 125e12, "A10"),
    ("NVIDIA A10", "fp32", 31.2e12, "A10"),
    ("Tesla V100-SXM2-16GB", "fp16", 125e12, "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "fp16", 112e12, "V100 PCIe"),
    ("Tesla V100-SXM2-32GB", "tf32", 15.7e12, "V100 SXM2"),  # no tf32 tensor cores: its fp32
    ("Tesla T4", "fp16", 65e12, "T4"),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12, "RTX 4090"),
    ("NVIDIA GeForce RTX 3090", "fp32", 35.6e12, "RTX 3090"),
]


@pytest.mark.parametrize(("name", "dtype", "peak", "row"), NAMES, ids=[n for n, *_ in NAMES])
def test_the_table_reads_each_card_by_its_name(name, dtype, peak, row):
    assert table_peak(name, dtype) == (peak, row)


def test_the_table_knows_what_it_does_not_know():
    assert table_peak("Tesla V100-SXM2-16GB", "bf16") == (None, "V100 SXM2")  # no bf16 tensor cores
    assert table_peak("Some Future Accelerator 9000", "bf16") == (None, "")


def test_the_peak_dtype_follows_the_trainer_precision():
    assert [precision_dtype(p) for p in ("bf16-mixed", "bf16-true", "16-mixed", "64-true")] == [
        "bf16",
        "bf16",
        "fp16",
        "fp64",
    ]
    assert precision_dtype("32-true", "cpu") == "fp32"
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # TF32 matmuls allowed: a GPU's float32 runs as tf32
        assert (precision_dtype("32-true", "cuda"), precision_dtype("32-true", "cpu")) == ("tf32", "fp32")
        torch.set_float32_matmul_precision("highest")
        assert precision_dtype("32-true", "cuda") == "fp32"
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_cpu_peak_is_measured_once_and_read_back(tmp_path):
    cache = tmp_path / "cache" / "peaks.json"
    peak = measured_peak("fp32", cache)
    assert 1e8 < peak < 1e14, peak  # a float matmul's FLOP/s on one CPU
    key = f"{cpu_model()} | {torch.get_num_threads()} threads | fp32"
    assert json.loads(cache.read_text()) == {key: peak}
    cache.write_text(json.dumps({key: 123.0}))  # what is cached is what is read: nothing measured again
    assert measured_peak("fp32", cache) == 123.0
    assert device_peak(torch.device("cpu"), "fp32", None, cache) == (
        123.0,
        f"measured: {cpu_model()}, {torch.get_num_threads()} threads, fp32",
    )
    assert device_peak(torch.device("cpu"), "fp32", 5e9, cache) == (5e9, "perf.peak_flops")
    cache.write_text("{not json")  # damaged: measured again, and the file made whole
    assert measured_peak("fp32", cache) > 1e8 and key in json.loads(cache.read_text())


def test_each_thread_count_and_dtype_has_its_own_peak(tmp_path):
    cache, threads = tmp_path / "peaks.json", torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        measured_peak("fp32", cache)
        measured_peak("bf16", cache)
        torch.set_num_threads(2)
        measured_peak("fp32", cache)
    finally:
        torch.set_num_threads(threads)
    keys = sorted(json.loads(cache.read_text()))
    assert [k.rpartition(" | ")[0].rpartition(" | ")[2] for k in keys] == [
        "1 threads",
        "1 threads",
        "2 threads",
    ]
    assert sorted(k.rpartition(" | ")[2] for k in keys) == ["bf16", "fp32", "fp32"]


def _lm_head(vocab: int, width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Embedding(vocab, width), torch.nn.Dropout(0.5), torch.nn.Linear(width, vocab, bias=False)
    )


def _loss(logits, targets, loss_mask):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_the_flop_count_is_the_hand_count_of_a_linear_layer():
    """An embedding (no products) into a linear layer of N = width x vocab weights: 2·N a token forward, 2·N for its
    input's gradient and 2·N for its weight's, so 6·N·tokens; the cross entropy adds no products."""
    vocab, width, b, t = 50, 16, 3, 7
    model = _lm_head(vocab, width)
    batch = {
        "input_ids": torch.randint(0, vocab, (b, t)),
        "targets": torch.randint(0, vocab, (b, t)),
        "loss_mask": torch.ones(b, t, dtype=torch.bool),
    }
    assert batch_flops(model, _loss, batch) == 6 * width * vocab * b * t
    assert all(p.grad is None for p in model.parameters()), "the count leaves no gradient behind"
    model.requires_grad_(False)  # nothing to train: the forward alone
    assert batch_flops(model, _loss, batch) == 2 * width * vocab * b * t


def test_counting_leaves_the_random_generators_and_each_modules_mode_as_they_were():
    model, ids = _lm_head(20, 8), torch.randint(0, 20, (2, 5))
    model[2].eval()  # one module kept in eval mode on purpose (a frozen part)
    batch = {"input_ids": ids, "targets": ids, "loss_mask": torch.ones(2, 5, dtype=torch.bool)}
    torch.manual_seed(1)
    untouched = torch.rand(4)
    torch.manual_seed(1)
    batch_flops(model, _loss, batch)
    assert torch.equal(torch.rand(4), untouched)
    assert [m.training for m in model.modules()] == [True, True, True, False]


def test_the_timeline_gives_each_phase_its_time_and_restores_what_it_wrapped():
    timeline = Timeline(torch.device("cpu"))
    guard = pl.Callback()
    guard.on_train_batch_end = lambda *args: time.sleep(0.02)  # a callback's hook of its own, set on it
    held = guard.on_train_batch_end
    wrapped = Wrapped(timeline)
    wrapped.hooks(guard, "harness")
    started = time.perf_counter()
    timeline.switch("data_wait")
    time.sleep(0.03)
    timeline.switch("forward_backward")
    guard.on_train_batch_end(None, None)  # its time is the harness's, not the forward's
    timeline.switch("other")
    timeline.close()
    elapsed = time.perf_counter() - started
    spent = timeline.window()
    assert set(spent) == set(PHASES)
    assert spent["data_wait"] >= 0.03 and spent["harness"] >= 0.02, spent
    assert spent["forward_backward"] < spent["harness"], spent
    assert sum(spent.values()) <= elapsed + 1e-3, (spent, elapsed)
    wrapped.restore()
    assert guard.on_train_batch_end is held and "on_train_start" not in vars(guard)
