"""The peak FLOP/s an MFU is read against (`device_peak`): vendor datasheets' dense figures for common GPUs
(PEAKS, matched on the device's name), `perf.peak_flops` for any other device, and on a CPU a matmul measured in
bursts, its best kept (N threads at least N times one), cached per machine (`measured_peak`) and measured again
where a run goes faster (`raise_peak`)."""

from __future__ import annotations

import json
import logging
import math
import platform
import re
import time
from pathlib import Path

import torch

from harness.report.verdict import write_atomic

log = logging.getLogger(__name__)

#: dense peak FLOP/s a GPU by the dtype its matrix products run in, from the vendor's datasheet (the figures
#: "with sparsity" halved). GeForce cards: fp16/bf16 with fp32 accumulation, the only kind torch's matmuls use.
PEAKS = {
    "H100 SXM": {"fp64": 33.5e12, "fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "H100 PCIe": {"fp64": 25.6e12, "fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
    "H100 NVL": {"fp64": 30e12, "fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "H200 SXM": {"fp64": 34e12, "fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "H200 NVL": {"fp64": 30e12, "fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "A100": {"fp64": 9.7e12, "fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},  # SXM and PCIe
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362.05e12, "fp16": 362.05e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
    "A10": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},  # A10G: AWS's A10, its figures
    "V100 SXM2": {"fp64": 7.8e12, "fp32": 15.7e12, "fp16": 125e12},  # no bf16 or tf32 tensor cores
    "V100 PCIe": {"fp64": 7e12, "fp32": 14e12, "fp16": 112e12},
    "T4": {"fp32": 8.1e12, "fp16": 65e12},
    "RTX 4090": {"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12, "fp16": 165.2e12},
    "RTX 3090": {"fp32": 35.6e12, "tf32": 35.6e12, "bf16": 71e12, "fp16": 71e12},
}
#: torch.cuda.get_device_name(), lowercased -> its row of PEAKS: the first pattern found in it
NAMES = (
    (r"h100.*nvl", "H100 NVL"),
    (r"h100.*pcie", "H100 PCIe"),
    (r"h200.*nvl", "H200 NVL"),
    (r"h200", "H200 SXM"),
    (r"h100", "H100 SXM"),  # "H100 80GB HBM3" is the SXM card; GH200's GPU has its figures too
    (r"a100", "A100"),
    (r"l40s", "L40S"),
    (r"\bl4\b", "L4"),
    (r"\ba10g?\b", "A10"),
    (r"v100.*pcie", "V100 PCIe"),
    (r"v100", "V100 SXM2"),
    (r"\bt4\b", "T4"),
    (r"rtx 4090", "RTX 4090"),
    (r"rtx 3090", "RTX 3090"),
)
#: the dtypes a CPU's peak is measured in
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
SIZE = 384  # the measured matrices' side
#: the products run in BURSTS bursts of BURST_S seconds, PAUSE_S apart, the fastest pair of all kept: on a shared
#: machine a neighbour's busy moment costs a burst, not the figure (one 0.1 s run read 8.1e9 FLOP/s on 2 threads
#: of a loaded machine against 1.6e11 on one idle thread)
BURSTS, BURST_S, PAUSE_S = 5, 0.02, 0.01


def precision_dtype(precision: str, device_type: str = "cuda") -> str:
    """The dtype a Trainer's `precision` (trainer.precision: "bf16-mixed", "32-true", ...) runs its matrix
    products in: bf16, fp16, fp32, fp64, or tf32 (float32 on a GPU with torch's TF32 matmuls allowed)."""
    text = str(precision)
    if text.startswith("bf16") or text == "transformer-engine":
        return "bf16"
    if text.startswith("16") or "float16" in text:
        return "fp16"
    if text.startswith("64"):
        return "fp64"
    tf32 = device_type == "cuda" and torch.get_float32_matmul_precision() != "highest"
    return "tf32" if tf32 else "fp32"


def table_peak(device_name: str, dtype: str) -> tuple[float | None, str]:
    """(the datasheet's dense peak of `device_name` in `dtype`, its row's name); (None, "") where PEAKS has no row
    or no figure for it. A card without tf32 tensor cores runs tf32 as fp32."""
    name = device_name.lower()
    row = next((row for pattern, row in NAMES if re.search(pattern, name)), None)
    if row is None:
        return None, ""
    figures = PEAKS[row]
    peak = figures.get(dtype, figures.get("fp32") if dtype == "tf32" else None)
    return peak, row


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's), else what the platform says of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _matmul_rate(dtype: torch.dtype) -> float:
    """FLOP/s of the fastest pair of SIZE x SIZE products in `dtype`, over BURSTS bursts, on this thread count."""
    # a generator of its own: the run's random stream is the same whether the peak was measured or read back
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(SIZE, SIZE, generator=generator).to(dtype) for _ in range(2))
    a @ b  # the first product pays for the kernel's set-up
    best = 0.0
    for burst in range(BURSTS):
        time.sleep(PAUSE_S if burst else 0)  # a sleeper woken is run first: the burst starts on a free core
        started = time.perf_counter()
        while time.perf_counter() - started < BURST_S:
            tick = time.perf_counter()
            a @ b
            a @ b
            best = max(best, 4 * SIZE**3 / (time.perf_counter() - tick))
    return best


def _one_thread_rate(dtype: torch.dtype) -> float:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _matmul_rate(dtype)
    finally:
        torch.set_num_threads(threads)


def peak_key(dtype: str, threads: int | None = None) -> str:
    """The cache's key of this CPU's peak in `dtype` at `threads` (torch's current count by default)."""
    return f"{cpu_model()} | {threads or torch.get_num_threads()} threads | {dtype}"


def measured_peak(dtype: str, cache: Path) -> float:
    """This CPU's matmul FLOP/s in `dtype` at torch's current thread count: read from `cache` (a JSON file keyed
    by CPU model, threads and dtype), else measured (~0.15 s) and written there. N threads are worth N times one, as
    a datasheet's peak is its cores' sum: a figure below that is the load's, not the CPU's (threads that wait on a
    busy neighbour's core), and the cores' sum is kept (both figures cached). One thread's figure holds on a loaded
    machine where several threads' cannot: a thread woken from its pause runs before the busy ones."""
    threads, known = torch.get_num_threads(), _read_cache(cache)
    key, single = peak_key(dtype, threads), peak_key(dtype, 1)
    cached, floor = _figure(known.get(key)), _figure(known.get(single)) if threads > 1 else None
    if threads > 1 and floor is None:  # a cache written without the floor is held to it too, once measured
        floor = _one_thread_rate(DTYPES[dtype])
        _write_cache(cache, {single: floor})
    if cached is not None and (floor is None or cached >= threads * floor):
        return cached
    figures = {key: max(cached or 0.0, _matmul_rate(DTYPES[dtype]))}
    if floor is not None:
        figures[single] = floor
        figures[key] = max(figures[key], threads * floor)
    _write_cache(cache, figures)
    return figures[key]


def raise_peak(dtype: str, cache: Path, cached: float) -> float:
    """This CPU's peak in `dtype` at torch's thread count measured again (a run's steps outran the `cached` one,
    measured low on a busy machine), at least `cached`, written to `cache`. Only what was measured is written: a
    rate above it is the FLOP count's fault or the peak's, never a peak."""
    threads = torch.get_num_threads()
    cores = threads * _one_thread_rate(DTYPES[dtype]) if threads > 1 else 0.0  # as measured_peak: their sum
    peak = max(cached, _matmul_rate(DTYPES[dtype]), cores)
    _write_cache(cache, {peak_key(dtype, threads): peak})
    return peak


def _figure(value) -> float | None:
    """A cached peak: a FLOP/s figure above 0, else None (measured again)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if number and math.isfinite(value) and value > 0 else None


def _write_cache(cache: Path, figures: dict[str, float]) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, json.dumps({**_read_cache(cache), **figures}, indent=2) + "\n")
    except OSError as err:  # a read-only folder: measured again next run
        log.warning("perf: the CPU's measured peak not cached in %s (%s)", cache, err)


def _read_cache(cache: Path) -> dict:
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):  # none yet, or damaged: measured again and rewritten
        return {}
    return known if isinstance(known, dict) else {}


def device_peak(device: torch.device, dtype: str, given: float | None, cache: Path) -> tuple:
    """(peak FLOP/s of one `device` in `dtype`, where the figure comes from); (None, why) where none is known."""
    if given is not None:
        return float(given), "perf.peak_flops"
    if device.type == "cpu":
        source = f"measured: {cpu_model()}, {torch.get_num_threads()} threads, {dtype}"
        return measured_peak(dtype, cache), source
    if device.type != "cuda":
        return None, f"no peak known for a {device.type} device: set perf.peak_flops"
    name = torch.cuda.get_device_name(device)
    peak, row = table_peak(name, dtype)
    if peak is None:
        return None, f"{name} in {dtype} is not in harness.train.perf.peak.PEAKS: set perf.peak_flops"
    return peak, f"datasheet: {row}, {dtype} dense"
