"""Synthetic data of any length, written to disk in the one format the real loader reads (practice P9)."""

from __future__ import annotations

import hashlib
import random

from harness.data.dataset import DiskDataModule
from harness.errors import ConfigError

RULES = ("random", "first_token")


def generate(length: int, size: int, rule: str, alphabet: str, labels: str, seed: int) -> list[dict]:
    """`size` records of `length` random tokens and one label token.

    rule=random:      the label is drawn at random (only memorization can learn it).
    rule=first_token: the label is a function of the first token (a dependency across the whole
                      sequence: back-propagation through time has to carry it `length - 1` steps)."""
    rng = random.Random(seed)
    records = []
    for _ in range(size):
        text = "".join(rng.choice(alphabet) for _ in range(length))
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
        if set(alphabet) & set(labels) or len(set(alphabet + labels)) != len(alphabet + labels):
            raise ConfigError(
                "data.labels", labels, "label tokens must be distinct from each other and from data.alphabet"
            )
        self.size, self.val_size, self.rule = size, val_size, rule
        self.alphabet, self.labels, self.seed = alphabet, labels, seed
        tag = hashlib.sha256((alphabet + "|" + labels).encode()).hexdigest()[:6]
        self.dataset_dir = self.root / "synthetic" / f"{rule}-L{length}-N{size}-V{val_size}-s{seed}-{tag}"

    def build(self):
        records = generate(
            self.length, self.size + self.val_size, self.rule, self.alphabet, self.labels, self.seed
        )
        splits = {"train": records[: self.size], "val": records[self.size :]}
        source = {"generator": "synthetic", "rule": self.rule, "seed": self.seed, "labels": self.labels}
        return splits, "classify", self.alphabet + self.labels, source
