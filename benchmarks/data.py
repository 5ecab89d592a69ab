"""What data=corpus costs, in data.json: preparing a corpus against bare `tokenizers` (`prepare_vs_tokenizers`,
target >= 0.8), its peak memory (`prepare_peak_mb`, <= 1024) and the loader's share of a training step
(`loader_share`, <= 0.02). Each figure's method is in the notes below; the details hold the raw figures."""

# prepare_vs_tokenizers: the corpus's MB/s through `prepare()` / its MB/s through a bare `encode_batch`, in one
# process. The corpus: the running Python's standard library source (`files="stdlib"`, about 12 MB), a BPE of
# `vocab_size` tokens trained on it first and not timed. Each side runs on `workers` threads. prepare:
# `prepare(data)` with the shards' folder deleted beforehand and tokenizer.json kept: plan the tasks, load the BPE,
# fork `workers` processes that read the files from disk (the page cache: a warm-up prepare ran first), decode them,
# tokenize them with `encode_batch` (TOKENIZERS_PARALLELISM=false, as tokenizers itself sets it in a process forked
# after its threads ran: one thread a worker), add the EOS, write and hash the shards; then meta.json and the
# rename. (A prepare that finds its BPE trained, as prepare_peak_mb's child does, lets each worker start tokenizers'
# threads too.) tokenizers: the same BPE's `encode_batch_fast` (tokenizers >= 0.21; else `encode_batch`) over the
# same files' texts, already in memory, one text a file, on tokenizers' own thread pool of `workers` threads
# (RAYON_NUM_THREADS, where no earlier use in the process fixed the pool first). Both produce the same tokens (the
# details hold both counts: the shards' also count one EOS a file). Reps alternate which side goes first; the figure
# is the ratio of the median rates.
#
# prepare_peak_mb: the peak memory of preparing a corpus of `corpus_mb` MB (200; BENCH_DATA_MB overrides): the
# stdlib's files copied again and again, under distinct names, into a temporary folder, and prepared by a fresh
# `python -c` child (the bench's own memory does not count) with the BPE trained above copied in (so its training is
# not counted here either). The figure is the highest total, over the child and its forked workers, of their
# proportional set sizes (Pss in /proc/PID/smaps_rollup: a page shared by n processes counts 1/n in each), sampled
# every 50 ms. The details hold each process's sampled peak Pss, the sampled total of plain RSS, the kernel's exact
# peak RSS of the child (VmHWM) and of its largest worker (the child's RUSAGE_CHILDREN ru_maxrss), and the child's
# RSS right after its imports (`harness.data` imports torch and Lightning). Not the child's own ru_maxrss, nor the
# bench's RUSAGE_CHILDREN: Linux carries a process's peak across exec, so a child spawned by the bench reads the
# bench's own peak there.
#
# loader_share: the corpus's training loader (`train_dataloader()`, `batch_size` windows of `length` tokens, no
# loader workers: conf/data/corpus.yaml's 16, 128 and 0) against a training step of `GPT(size="small")` on each
# batch it gives (forward, masked cross entropy, backward, AdamW step, zero_grad), alternating, on the bench's torch
# threads (BENCH_THREADS, default 1): loader seconds / (loader + step seconds), over `steps` batches after `warmup`.

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import write

TARGETS = {
    "prepare_vs_tokenizers": (">=", 0.8),
    "prepare_peak_mb": ("<=", 1024.0),
    "loader_share": ("<=", 0.02),
}
CORPUS_MB = 200.0  # the corpus prepare_peak_mb prepares; BENCH_DATA_MB overrides
MB = 1e6

#: what the child that prepares the large corpus runs: argv[1] is a JSON of its arguments; prints a JSON line
CHILD = """
import json, resource, shutil, sys, time
args = json.loads(sys.argv[1])
started = time.perf_counter()
from harness.data.sources.corpus import Corpus

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

imported = {"seconds": time.perf_counter() - started, "rss": status("VmRSS"), "torch": "torch" in sys.modules,
            "lightning": "pytorch_lightning" in sys.modules}
tokenizer = {"kind": "bpe", "vocab_size": args["vocab_size"]}
data = Corpus(length=args["length"], files=args["files"], tokenizer=tokenizer, root=args["root"],
              workers=args["workers"])
data.tokenizer_dir.mkdir(parents=True, exist_ok=True)
shutil.copyfile(args["tokenizer_json"], data.tokenizer_dir / "tokenizer.json")
started = time.perf_counter()
data.prepare()
seconds = time.perf_counter() - started
meta = json.loads((data.dataset_dir / "meta.json").read_text())
print(json.dumps({"imports": imported, "prepare_s": seconds, "tokens": meta["tokens"],
                  "bytes": meta["source"]["bytes"], "files": meta["source"]["files"],
                  "shards": len(meta["shards"]), "child_hwm": status("VmHWM"),
                  "worker_maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def met(figure: str, value: float) -> bool:
    sense, target = TARGETS[figure]
    return value >= target if sense == ">=" else value <= target


@contextlib.contextmanager
def environ(**values: str | None):
    """os.environ with `values` set (None: removed), restored afterwards."""

    def put(settings: dict) -> None:
        for key, value in settings.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    saved = {key: os.environ.get(key) for key in values}
    put(values)
    try:
        yield
    finally:
        put(saved)


def timed_once(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def stdlib_data(
    root: Path, vocab_size: int, workers: int, max_bytes: int | None, length: int, batch_size: int
):
    """The stdlib corpus's datamodule under `root`, its BPE trained (and not yet prepared)."""
    from harness.data import CorpusDataModule, shards
    from harness.data.prepare_corpus import corpus_tokenizer

    tokenizer = {"kind": "bpe", "vocab_size": vocab_size}
    data = CorpusDataModule(
        length=length,
        files="stdlib",
        tokenizer=tokenizer,
        max_bytes=max_bytes,
        root=str(root),
        workers=workers,
        batch_size=batch_size,
    )
    corpus_tokenizer(
        data.corpus, shards.plan(data.corpus.files, data.corpus.workers)
    )  # writes tokenizer.json
    return data


def throughput(data, reps: int) -> dict:
    """Seconds of `prepare(data)` (its shards deleted first) and of a bare encode_batch of the same texts,
    alternating (see the module docstring); the shards are left prepared."""
    from harness.data.integrity import read_meta
    from harness.data.prepare_corpus import prepare

    texts = [Path(path).read_text(encoding="utf-8") for path, _ in data.corpus.files]
    backend = data.corpus.trained_bpe().backend
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    tokens = {}

    def bare() -> None:
        tokens["tokenizers"] = sum(len(e.ids) for e in encode(texts, add_special_tokens=False))

    def prepared() -> float:
        shutil.rmtree(data.dataset_dir, ignore_errors=True)
        with environ(TOKENIZERS_PARALLELISM="false"):
            seconds = timed_once(lambda: prepare(data.corpus))
        tokens["prepare"] = read_meta(data.dataset_dir)[0]["tokens"]
        return seconds

    prepared(), bare()  # warm-up: the page cache, the pool's first fork, tokenizers' thread pool
    seconds = {"prepare": [], "tokenizers": []}
    for rep in range(reps):
        for side in ("prepare", "tokenizers") if rep % 2 == 0 else ("tokenizers", "prepare"):
            seconds[side].append(prepared() if side == "prepare" else timed_once(bare))
    return {"seconds": seconds, "tokens": tokens, "bytes": sum(size for _, size in data.corpus.files)}


def rates_of(measured: dict) -> tuple[float, float]:
    """(prepare, tokenizers) MB/s from `throughput()`'s result: the corpus's bytes over each side's median
    seconds. prepare_vs_tokenizers is the first over the second."""
    prepare_s, bare_s = (statistics.median(measured["seconds"][side]) for side in ("prepare", "tokenizers"))
    return measured["bytes"] / MB / prepare_s, measured["bytes"] / MB / bare_s


def build_corpus(folder: Path, corpus_mb: float) -> int:
    """Copy the stdlib's files into `folder`, round after round, under distinct names, until they hold
    `corpus_mb` MB; the bytes written."""
    from harness.data.sources.corpus import stdlib_files

    folder.mkdir(parents=True, exist_ok=True)
    sources, total, i = stdlib_files(), 0, 0
    while total < corpus_mb * MB:
        source = sources[i % len(sources)]
        shutil.copyfile(source, folder / f"{i:06d}_{source.name}")
        total, i = total + source.stat().st_size, i + 1
    return total


class TreeMemory:
    """Samples, every `every_s`, the Pss and Rss of process `pid` and its descendants (Linux' /proc); keeps
    the peaks of their sums, and each process's peak Pss (`each`, by pid)."""

    def __init__(self, pid: int, every_s: float = 0.05):
        self.pid, self.every_s = pid, every_s
        self.pss = self.rss = self.processes = 0
        self.each: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def tree(self) -> list[int]:
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            todo += map(int, children)
        return pids

    @staticmethod
    def usage(pid: int) -> tuple[int, int]:
        """(Pss, Rss) bytes of `pid`; zeros where it is gone."""
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            return 0, 0
        fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in text.splitlines()[1:]}
        return fields.get("Pss", 0), fields.get("Rss", 0)

    def _sample(self) -> None:
        while True:
            pids = self.tree()
            usage = {pid: self.usage(pid) for pid in pids}
            for pid, (pss, _) in usage.items():
                self.each[pid] = max(self.each.get(pid, 0), pss)
            self.pss = max(self.pss, sum(pss for pss, _ in usage.values()))
            self.rss = max(self.rss, sum(rss for _, rss in usage.values()))
            self.processes = max(self.processes, len(pids))
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def peak_memory(corpus_mb: float, tokenizer_json: Path, vocab_size: int, workers: int, length: int) -> dict:
    """Prepare a `corpus_mb` MB corpus in a fresh child process; its memory (see the module docstring)."""
    if not Path("/proc/self/smaps_rollup").is_file():
        raise RuntimeError(
            "prepare_peak_mb reads /proc/PID/smaps_rollup (Linux >= 4.14): run this benchmark on Linux"
        )
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        corpus = Path(tmp) / "corpus"
        written = build_corpus(corpus, corpus_mb)
        args = {
            "files": str(corpus),
            "root": str(Path(tmp) / "data"),
            "tokenizer_json": str(tokenizer_json),
            "vocab_size": vocab_size,
            "workers": workers,
            "length": length,
        }
        out, err = Path(tmp) / "child.out", Path(tmp) / "child.err"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            started = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(args)], stdout=stdout, stderr=stderr
            )
            memory = TreeMemory(child.pid)
            child.wait()
            memory.stop()
            wall = time.perf_counter() - started
        if child.returncode != 0:
            raise RuntimeError(f"the preparing child exited {child.returncode}: {err.read_text()[-2000:]}")
        report = json.loads(out.read_text().strip().splitlines()[-1])
    workers_pss = [pss for pid, pss in memory.each.items() if pid != child.pid]
    return {
        **report,
        "corpus_bytes_written": written,
        "child_wall_s": wall,
        "pss_peak": memory.pss,
        "child_pss_peak": memory.each.get(child.pid, 0),
        "worker_pss_peak": max(workers_pss, default=0),
        "rss_sum_peak": memory.rss,
        "processes": memory.processes,
        "sampled_every_s": memory.every_s,
    }


def loader_share(data, size: str, warmup: int, steps: int) -> dict:
    """Seconds of each batch fetched from `data`'s train loader and of the GPT training step on it."""
    import torch

    from harness.models import GPT
    from harness.train.module import HarnessModule

    data.setup("fit")
    torch.manual_seed(0)
    module = HarnessModule(GPT(data.tokenizer.vocab_size, max_len=data.length, size=size))
    model, optimizer = module.model, module.configure_optimizers()

    def step(batch: dict) -> None:
        loss = module.loss(model(batch["input_ids"]), batch["targets"], batch["loss_mask"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    batches = iter(data.train_dataloader())
    seconds = {"loader": [], "step": []}
    for i in range(warmup + steps):
        started = time.perf_counter()
        batch = next(batches)
        fetched = time.perf_counter()
        step(batch)
        if i >= warmup:
            seconds["loader"].append(fetched - started)
            seconds["step"].append(time.perf_counter() - fetched)
    shape = list(batch["input_ids"].shape)
    parameters = sum(p.numel() for p in model.parameters())
    return {"seconds": seconds, "batch": shape, "parameters": parameters, "threads": torch.get_num_threads()}


def measure(
    stdlib_bytes: int | None = None,
    corpus_mb: float = CORPUS_MB,
    vocab_size: int = 4096,
    workers: int | None = None,
    reps: int = 3,
    length: int = 128,
    batch_size: int = 16,
    size: str = "small",
    warmup: int = 3,
    steps: int = 5,
) -> tuple[dict, dict]:
    """(figures, details) of the three measurements; `stdlib_bytes` takes a slice of the stdlib (None: all)."""
    workers = workers or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-data-") as root:
        with environ(RAYON_NUM_THREADS=os.environ.get("RAYON_NUM_THREADS", str(workers))):
            started = time.perf_counter()
            data = stdlib_data(Path(root), vocab_size, workers, stdlib_bytes, length, batch_size)
            bpe_s = time.perf_counter() - started
            rates = throughput(data, reps)
        memory = peak_memory(
            corpus_mb, data.corpus.tokenizer_dir / "tokenizer.json", vocab_size, workers, length
        )
        loader = loader_share(data, size, warmup, steps)
    prepare_rate, bare_rate = rates_of(rates)
    loader_s, step_s = sum(loader["seconds"]["loader"]), sum(loader["seconds"]["step"])
    figures = {
        "prepare_vs_tokenizers": round(prepare_rate / bare_rate, 3),
        "prepare_peak_mb": round(memory["pss_peak"] / MB, 1),
        "loader_share": round(loader_s / (loader_s + step_s), 5),
        "prepare_mb_s": round(prepare_rate, 2),
        "tokenizers_mb_s": round(bare_rate, 2),
        "peak_corpus_mb": round(memory["bytes"] / MB, 1),
    }
    details = {
        "targets": {k: f"{sense} {target}" for k, (sense, target) in TARGETS.items()},
        "workers": workers,
        "rayon_num_threads": os.environ.get("RAYON_NUM_THREADS", str(workers)),
        "throughput": {
            **rates,
            "bpe_train_s": bpe_s,
            "vocab_size": vocab_size,
            "files": len(data.corpus.files),
        },
        "memory": memory,
        "loader": {**loader, "size": size, "length": length, "batch_size": batch_size},
    }
    return figures, details


def main(corpus_mb: float | None = None, **sizes) -> dict:
    """Measure (sizes: `measure`'s arguments), write data.json, return {figure: (value, target met?)}."""
    if corpus_mb is None:
        corpus_mb = float(os.environ.get("BENCH_DATA_MB", CORPUS_MB))
    figures, details = measure(corpus_mb=corpus_mb, **sizes)
    write("data", figures, details)
    return {k: (v, met(k, v) if k in TARGETS else None) for k, v in figures.items()}
