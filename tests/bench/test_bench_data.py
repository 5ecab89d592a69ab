"""The data benchmark runs end to end on a tiny stdlib slice and writes its figures (no timing asserted), and a
prepare slowed on purpose reads as a missed target."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

import benchmarks
from benchmarks import data as bench_data
from harness.data.tokenizer import HFTokenizer

TINY = dict(stdlib_bytes=100_000, vocab_size=300, workers=2, reps=1, length=16, batch_size=4, size="tiny")


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the bench's main sets it: two threads on a busy 2-core machine crawl
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow  # ~12 s: prepares two corpora and times a GPT step (make test-slow)
def test_data_bench_writes_its_figures(tmp_path, monkeypatch, one_thread):
    monkeypatch.setattr(benchmarks, "OUT", tmp_path)  # write() reads the package's OUT
    result = bench_data.main(corpus_mb=0.3, warmup=1, steps=2, **TINY)

    figures = json.loads((tmp_path / "data.json").read_text())
    assert {"prepare_vs_tokenizers", "prepare_peak_mb", "loader_share"} <= set(figures)
    assert all(isinstance(v, float) and math.isfinite(v) for v in figures.values()), figures
    assert figures["prepare_vs_tokenizers"] > 0 and figures["prepare_peak_mb"] > 0
    assert 0 <= figures["loader_share"] <= 1
    assert {k: v for k, (v, _) in result.items()} == figures
    for figure, (value, met) in result.items():
        assert met is (bench_data.met(figure, value) if figure in bench_data.TARGETS else None)

    details = json.loads((tmp_path / "data.details.json").read_text())
    rates, memory, loader = details["throughput"], details["memory"], details["loader"]
    prepare_rate, bare_rate = bench_data.rates_of(rates)  # the figure is the ratio of the two measured rates
    assert figures["prepare_vs_tokenizers"] == round(prepare_rate / bare_rate, 3)
    assert rates["tokens"]["prepare"] == rates["tokens"]["tokenizers"] + rates["files"]  # + an EOS a file
    assert memory["bytes"] >= 0.3e6 and memory["tokens"] > 0 and memory["processes"] >= 1
    assert memory["child_hwm"] >= memory["imports"]["rss"] > 0 and memory["worker_maxrss"] > 0
    assert memory["pss_peak"] >= max(memory["child_pss_peak"], memory["worker_pss_peak"]) > 0
    assert figures["prepare_peak_mb"] == round(memory["pss_peak"] / 1e6, 1)
    assert [len(loader["seconds"][k]) for k in ("loader", "step")] == [2, 2] and loader["batch"] == [4, 16]


@pytest.mark.slow  # a prepare with its workers slowed on purpose
def test_a_slow_prepare_misses_its_target(tmp_path, monkeypatch):
    """A second's sleep in the workers' encode_batch (inherited through fork) must show in the ratio."""
    encode_batch = HFTokenizer.encode_batch

    def slow(self, texts):
        time.sleep(1.0)
        return encode_batch(self, texts)

    monkeypatch.setattr(HFTokenizer, "encode_batch", slow)
    data = bench_data.stdlib_data(
        tmp_path, vocab_size=300, workers=2, max_bytes=100_000, length=16, batch_size=4
    )
    prepare_rate, bare_rate = bench_data.rates_of(bench_data.throughput(data, reps=1))
    assert not bench_data.met("prepare_vs_tokenizers", prepare_rate / bare_rate), (prepare_rate, bare_rate)
