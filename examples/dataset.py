"""Your own data, two ways, one format: real files converted once into the harness's dataset folder,
and a synthetic counterpart that generates the same kind of records into the same format.

    python -m examples.dataset examples/data/motifs.tsv data/motifs     # convert the real file, once
    python train.py data=folder data.path=data/motifs data.length=16     # train on it
    cp examples/conf/data/motifs.yaml conf/data/ && python train.py data=motifs data.length=64   # its synthetic counterpart

The task: does a DNA sequence contain the motif TATA? Label `y` or `n` at the last position. The synthetic counterpart
uses the same alphabet and labels, so a model built for one runs on the other (same vocabulary), and it
can make sequences of any length and any number, which the real file cannot."""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

from harness.data import DiskDataModule
from harness.data.format import write_dataset
from harness.errors import ConfigError

BASES, LABELS, MOTIF = "ACGT", "ny", "TATA"
ALPHABET = BASES + LABELS  # the tokenizer's alphabet: real and synthetic data must share it


def label(sequence: str) -> str:
    return LABELS[MOTIF in sequence]


def read_raw(path: Path) -> list[dict]:
    """Records {"text", "label"} from a tab-separated file of `sequence<TAB>label` lines."""
    records = []
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.reader(f, delimiter="\t"), start=1):
            if len(row) != 2 or row[1] not in LABELS or set(row[0]) - set(BASES):
                raise ValueError(
                    f"{path}:{line}: expected <sequence of {BASES}><TAB><one of {LABELS}>, got {row!r}"
                )
            records.append({"text": row[0], "label": row[1]})
    lengths = {len(r["text"]) for r in records}
    if len(lengths) != 1:
        raise ValueError(
            f"{path}: sequences of lengths {sorted(lengths)}; the format needs one length (pad or cut)"
        )
    return records


def convert(raw: Path, out: Path, val_fraction: float = 0.2) -> Path:
    """Write `raw` as a dataset folder at `out` (train = the first 80%, val = the rest): data=folder reads it."""
    records = read_raw(Path(raw))
    cut = max(1, round(len(records) * (1 - val_fraction)))
    return write_dataset(
        Path(out),
        {"train": records[:cut], "val": records[cut:]},
        task="classify",
        alphabet=ALPHABET,
        length=len(records[0]["text"]),
        source={"converted_from": Path(raw).name},
    )


def generate(length: int, size: int, seed: int) -> list[dict]:
    """`size` random sequences, half of them with the motif planted at a random place, labelled by the rule."""
    if length < len(MOTIF):
        raise ConfigError(
            "data.length", length, f"a sequence must hold the motif {MOTIF}: use data.length>={len(MOTIF)}"
        )
    rng = random.Random(seed)
    records = []
    for _ in range(size):
        bases = [rng.choice(BASES) for _ in range(length)]
        if rng.random() < 0.5:
            start = rng.randrange(length - len(MOTIF) + 1)
            bases[start : start + len(MOTIF)] = MOTIF
        text = "".join(bases)
        records.append({"text": text, "label": label(text)})
    return records


class MotifData(DiskDataModule):
    """The synthetic counterpart of the converted motifs: generated once under `root/motifs/`, read like any folder."""

    def __init__(
        self,
        length: int,
        size: int = 1000,
        val_size: int = 100,
        seed: int = 0,
        batch_size: int = 32,
        root: str = "data",
        num_workers: int = 0,
    ):
        super().__init__(length=length, batch_size=batch_size, root=root, num_workers=num_workers)
        self.size, self.val_size, self.seed = size, val_size, seed
        # the folder is named by every parameter: a different one is a different dataset, never a stale one
        self.dataset_dir = self.root / "motifs" / f"L{length}-N{size}-V{val_size}-s{seed}"

    def build(self):
        records = generate(self.length, self.size + self.val_size, self.seed)
        splits = {"train": records[: self.size], "val": records[self.size :]}
        return splits, "classify", ALPHABET, {"generator": "examples.dataset.MotifData", "seed": self.seed}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m examples.dataset RAW.tsv OUT_FOLDER")
    print(convert(Path(sys.argv[1]), Path(sys.argv[2])))
