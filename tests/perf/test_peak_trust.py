"""A peak an MFU cannot exceed: a CPU's matmul peak measured on a loaded machine is not read low, several threads
are worth at least one, a cached peak a run outruns is measured again and raised, and an MFU above a fixed peak
is a fault named in the log, never a share above 1 in verdict.json, metrics.csv, the DONE line or the summary."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from harness.models import Transformer
from harness.report.speed_section import speed_line, speed_part
from harness.report.summary import collect
from harness.train.module import HarnessModule
from harness.train.perf.peak import measured_peak, peak_key
from harness.train.perf.readout import Readout
from harness.train.perf.speed import Speed
from tests.conftest import train
from tests.perf.test_perf_figures import _classify_data, bare_trainer

#: a peak no CPU is below: a cached figure this low is one measured wrong
TINY = 1e6


def _busy(count: int) -> list[subprocess.Popen]:
    """`count` processes that keep a core each busy until killed, each already spinning when this returns."""
    loop = "print('spinning', flush=True)\nwhile True: pass"
    busy = [
        subprocess.Popen([sys.executable, "-c", loop], stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    assert all(process.stdout.readline().strip() == "spinning" for process in busy)
    return busy


def test_a_peak_measured_on_a_loaded_machine_is_not_read_low(tmp_path):
    """Planted: both cores busy with a loop each. One burst of 0.1 s read 8.1e9 FLOP/s on 2 threads of a busy
    machine against 1.04e11 on one: the bursts and the cores' sum of the one-thread figure keep it within 2x of a
    quiet figure."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = measured_peak("fp32", tmp_path / "one.json")
        torch.set_num_threads(2)
        quiet = measured_peak("fp32", tmp_path / "quiet.json")
        busy = _busy(os.cpu_count() or 2)
        try:
            loaded = measured_peak("fp32", tmp_path / "loaded.json")
        finally:
            for process in busy:
                process.kill()
                process.wait()
    finally:
        torch.set_num_threads(threads)
    assert quiet / 2 <= loaded <= 2 * quiet and loaded >= one / 2, (loaded, quiet, one)
    cached = json.loads((tmp_path / "loaded.json").read_text())
    assert cached[peak_key("fp32", 2)] >= 2 * cached[peak_key("fp32", 1)] > 0, cached


def test_a_several_thread_peak_below_one_threads_is_measured_again(tmp_path):
    cache, threads = tmp_path / "peaks.json", torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cache.write_text(json.dumps({peak_key("fp32", 2): TINY, peak_key("fp32", 1): 2e9}))
        peak = measured_peak("fp32", cache)
    finally:
        torch.set_num_threads(threads)
    written = json.loads(cache.read_text())
    assert peak >= 4e9 and written[peak_key("fp32", 2)] == peak and written[peak_key("fp32", 1)] == 2e9, (
        written
    )


def test_a_cache_written_without_the_one_thread_floor_is_held_to_it(tmp_path):
    """Planted: a cache an older harness wrote, a low two-thread figure and no one-thread one beside it."""
    cache, threads = tmp_path / "peaks.json", torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cache.write_text(json.dumps({peak_key("fp32", 2): TINY}))
        peak = measured_peak("fp32", cache)
    finally:
        torch.set_num_threads(threads)
    written = json.loads(cache.read_text())
    assert (
        written[peak_key("fp32", 1)] > TINY
        and peak == written[peak_key("fp32", 2)] >= 2 * written[peak_key("fp32", 1)]
    ), written


def test_steps_faster_than_a_peak_measured_again_are_a_fault_and_only_the_measured_peak_is_cached(tmp_path):
    """Planted: a FLOP count far too high (a rate no CPU reaches). The cached peak is measured again once; the rate
    above that is named a fault, and never written to the cache as a peak."""
    cache = tmp_path / "peaks.json"
    speed = Speed(peak_cache=str(cache))
    speed.peak, speed.peak_source, speed.dtype = TINY, "measured: this CPU", "fp32"
    speed._above_peak(step=4, rate=1e20)
    measured = speed.peak
    assert TINY < measured < 1e20 and "measured again at step 4" in speed.peak_source, speed.peak_source
    assert speed.mfu_fault is not None and "1e+20" in speed.mfu_fault, speed.mfu_fault
    assert max(json.loads(cache.read_text()).values()) == measured
    speed._above_peak(step=6, rate=1e20)  # once a run: not measured again
    assert speed.peak == measured and speed.peak_source.count("measured again") == 1


def _mfus(path) -> list[float]:
    with open(path, newline="") as f:
        return [float(r["perf/mfu"]) for r in csv.DictReader(f) if r.get("perf/mfu")]


@pytest.mark.slow  # ~10 s: a train.py run
def test_a_cached_peak_a_run_outruns_is_measured_again_and_raised(tmp_path, data_root):
    """Planted: the cache holds a tiny peak for this CPU at every thread count; the run's steps go faster."""
    cache = tmp_path / "data" / "perf_peaks.json"  # paths.data_dir is `data` where train.py starts
    cache.parent.mkdir()
    planted = {peak_key("fp32", n): n * TINY for n in range(1, (os.cpu_count() or 2) + 1)}  # the cores' sum
    cache.write_text(json.dumps(planted))
    result = train(
        "mode=full",
        "mode.max_steps=30",
        "probes=off",
        "mode.progress_bar=false",
        cwd=tmp_path,
        data_root=data_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run, log = tmp_path / "run", result.stdout + result.stderr
    perf = json.loads((run / "verdict.json").read_text())["perf"]
    raised = {k: v for k, v in json.loads(cache.read_text()).items() if v != planted.get(k)}
    assert len(raised) == 1 and perf["peak_flops"] == pytest.approx(next(iter(raised.values())), rel=1e-3), (
        raised
    )
    assert re.search(r"above the CPU's cached peak \de\+06", log) and "measured again" in perf["peak"], perf
    assert 0 < perf["mfu"] <= 1 and all(0 < m <= 1 for m in _mfus(run / "metrics.csv")), perf
    (done,) = [line for line in log.splitlines() if "DONE:" in line]
    shown = [float(m) for m in re.findall(r"MFU ([\d.]+)%", done)]
    assert len(shown) == 1 and shown[0] <= 100, done


def test_an_mfu_above_a_fixed_peak_is_a_fault_not_a_share(tmp_path, one_thread):
    """Planted: perf.peak_flops far below what the steps do (a datasheet figure can be raised no more than it)."""
    torch.manual_seed(0)
    module = HarnessModule(Transformer(10, d_model=16, layers=1, heads=2, max_len=16))
    speed = Speed(peak_flops=1e3, warmup=2, peak_cache=str(tmp_path / "peaks.json"))
    trainer = bare_trainer(tmp_path, [speed, Readout()], max_steps=8)
    trainer.fit(module, train_dataloaders=_classify_data())
    perf = speed.verdict_items()["perf"]
    assert perf["mfu"] is None and "perf.peak_flops" in perf["mfu_fault"], perf
    assert _mfus(tmp_path / "metrics.csv") == [] and not (tmp_path / "peaks.json").exists()
    assert speed_line(perf).count("no MFU (a measurement fault)") == 1 and "%;" not in speed_line(perf)
    row = _mfu_row(speed_part({"perf": perf}, {}))
    assert "a measurement fault" in row and 'class="num"' not in row, row  # the cell empty, the fault said


def test_a_verdict_with_an_mfu_above_1_shows_none(tmp_path):
    """A verdict an earlier harness wrote: mfu 1.637 against a peak measured low."""
    perf = {
        "tokens_per_s": 1234.5,
        "mfu": 1.637,
        "peak": "measured: a CPU, 2 threads, fp32",
        "time_share": {},
    }
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "verdict.json").write_text(json.dumps({"status": "DONE", "mode": "full", "perf": perf}))
    (job,) = collect(tmp_path)
    assert job.row["tokens_per_s"] == 1234.5 and job.row["mfu"] is None, job.row
    assert "163" not in speed_line(perf) and "no MFU (a measurement fault)" in speed_line(perf)
    row = _mfu_row(speed_part({"perf": perf}, {}))
    assert "above 1, a fault of the peak" in row and 'class="num"' not in row, row


def _mfu_row(part: str) -> str:
    """The Speed table's mfu row."""
    return (
        part.split('id="speed-table"', 1)[1].split('<td class="detail">mfu</td>', 1)[1].split("</tr>", 1)[0]
    )
