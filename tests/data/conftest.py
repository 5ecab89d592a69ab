"""What the corpus tests share: a folder of code-like text files (`corpus`), and a CorpusDataModule over files,
prepared and set up."""

from __future__ import annotations

import gzip
import json
import random

import pytest

from harness.data import CorpusDataModule

WORDS = [
    "def",
    "return",
    "self",
    "value",
    "import",
    "class",
    "lambda",
    "yield",
    "None",
    "True",
    "False",
    "for",
    "while",
    "if",
    "else",
    "print",
]


def code_like(rng: random.Random, lines: int) -> str:
    """Python-looking text, with some non-ASCII, so that BPE has merges to learn and bytes to split."""
    out = []
    for _ in range(lines):
        indent = "    " * rng.randint(0, 2)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        out.append(f"{indent}{words}({rng.randint(0, 99)})" + (" # café ✓" if rng.random() < 0.1 else ""))
    return "\n".join(out) + "\n"


@pytest.fixture
def corpus(tmp_path):
    """A folder of .py, .md, .txt, .jsonl and .txt.gz files; the documents each holds, in corpus order."""
    rng, folder = random.Random(0), tmp_path / "corpus"
    folder.mkdir()
    docs = {}
    for name in ("a.py", "b.md", "c.txt"):
        docs[name] = [code_like(rng, 120)]
        (folder / name).write_text(docs[name][0], encoding="utf-8")
    docs["d.jsonl"] = [code_like(rng, 5) for _ in range(4)]
    (folder / "d.jsonl").write_text("".join(json.dumps({"text": t, "id": 1}) + "\n" for t in docs["d.jsonl"]))
    docs["e.txt.gz"] = [code_like(rng, 60)]
    with gzip.open(folder / "e.txt.gz", "wt", encoding="utf-8") as f:
        f.write(docs["e.txt.gz"][0])
    docs["f.jsonl.gz"] = [code_like(rng, 3) for _ in range(2)]
    with gzip.open(folder / "f.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": t}) + "\n" for t in docs["f.jsonl.gz"]))
    return folder, [d for name in sorted(docs) for d in docs[name]]


def datamodule(files, root, tokenizer=None, **kwargs) -> CorpusDataModule:
    args = {"length": 16, "workers": 2, "batch_size": 4, **kwargs}
    return CorpusDataModule(files=str(files), root=str(root), tokenizer=tokenizer or {"kind": "char"}, **args)


def ready(dm: CorpusDataModule) -> CorpusDataModule:
    dm.prepare_data()
    dm.setup("fit")
    return dm


BPE = {"kind": "bpe", "vocab_size": 300}
