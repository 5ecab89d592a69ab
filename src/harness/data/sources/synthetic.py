"""SyntheticDataModule: random labelled sequences of any length, written to disk in the one format the real
loader reads (practice P9)."""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path

from harness.config.groups.data import RULES, synthetic_tokens
from harness.data.dataset import DiskDataModule
from harness.errors import ConfigError

log = logging.getLogger(__name__)

#: tokens a second that generating, writing and reading back a dataset reached on one busy core (measured:
#: 12M tokens in 6.4 s), and the memory a token took at the peak (420 MB for those 12M)
TOKENS_PER_S, BYTES_PER_TOKEN = 1_500_000, 40
#: generation expected to take longer than this is announced, with its estimate
ANNOUNCE_S = 20


def _free_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), or None where /proc/meminfo is not."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _check_size(length: int, examples: int) -> None:
    """Refuse, before anything is generated, a dataset that cannot fit in memory when read back."""
    needed, free = length * examples * BYTES_PER_TOKEN, _free_memory()
    if free is not None and needed > free:
        raise ConfigError(
            "data.length",
            length,
            f"{examples} examples of {length} tokens need about {needed / 2**30:.1f} GiB of memory and "
            f"{free / 2**30:.1f} GiB is free; lower data.length or data.size",
        )


def generate(length: int, size: int, rule: str, alphabet: str, labels: str, seed: int) -> list[dict]:
    """`size` records of `length` random tokens and a label token: random (rule=random) or a function of the
    first token (rule=first_token)."""
    rng = random.Random(seed)
    records = []
    for _ in range(size):
        text = "".join(rng.choice(alphabet) for _ in range(length))
        # random: only memorization learns it; first_token: a dependency carried across the whole sequence
        label = rng.choice(labels) if rule == "random" else labels[alphabet.index(text[0]) % len(labels)]
        records.append({"text": text, "label": label})
    return records


class SyntheticDataModule(DiskDataModule):
    """Random token sequences with a label at the last position, cached under `root/synthetic/`."""

    def __init__(
        self,
        length: int,
        size: int = 1000,
        val_size: int = 100,
        rule: str = "random",
        alphabet: str = "abcdefghijklmnop",
        labels: str = "0123",
        seed: int = 0,
        batch_size: int = 32,
        root: str = "data",
        num_workers: int = 0,
    ):
        super().__init__(length=length, batch_size=batch_size, root=root, num_workers=num_workers)
        if rule not in RULES:
            raise ConfigError("data.rule", rule, f"choose one of {', '.join(RULES)}")
        if size < 1 or val_size < 1:
            raise ConfigError(
                "data.size" if size < 1 else "data.val_size",
                size if size < 1 else val_size,
                "a split needs at least 1 example",
            )
        synthetic_tokens(alphabet, labels)
        _check_size(length, size + val_size)
        self.size, self.val_size, self.rule = size, val_size, rule
        self.alphabet, self.labels, self.seed = alphabet, labels, seed
        tag = hashlib.sha256((alphabet + "|" + labels).encode()).hexdigest()[:6]
        self.dataset_dir = self.root / "synthetic" / f"{rule}-L{length}-N{size}-V{val_size}-s{seed}-{tag}"

    def build(self):
        seconds = self.length * (self.size + self.val_size) / TOKENS_PER_S
        if seconds > ANNOUNCE_S:  # said up front: a long wait should not look like a hang
            log.warning(
                "generating %d examples of %d tokens: about %.0f s (once: cached in %s); the preflight and each "
                "training step grow with data.length too",
                self.size + self.val_size,
                self.length,
                seconds,
                self.dataset_dir,
            )
        records = generate(
            self.length, self.size + self.val_size, self.rule, self.alphabet, self.labels, self.seed
        )
        splits = {"train": records[: self.size], "val": records[self.size :]}
        source = {"generator": "synthetic", "rule": self.rule, "seed": self.seed, "labels": self.labels}
        return splits, "classify", self.alphabet + self.labels, source
