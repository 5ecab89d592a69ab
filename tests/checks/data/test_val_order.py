"""`val_order`: a validation loader that shuffles, or a validation set drawn at random as it is read, fails
in its own row, named with its fix, whatever the global seed; every correct loader (the built-in sources, a
fork's, a fixed order of its own) passes; and the row draws nothing that training would miss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Subset

from harness import checks
from harness.data import CorpusDataModule, FolderDataModule, SyntheticDataModule, TextDataModule
from harness.report.verdict import read_verdict
from harness.seeding import rng_state
from tests.checks.data import val_forks
from tests.checks.data.planted_rows import DETAIL, config, preflight
from tests.conftest import TESTS_CONF
from tests.forks.data import build
from tests.forks.data.correct import PaddedLM, StreamingLM

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

FIX = "shuffle=False"
PLANTED = {  # planted mistake -> words its FAIL must hold: what it is, and the fix
    "ShuffledVal": ["sampler is a RandomSampler", FIX],
    "SampledVal": ["sampler is a RandomSampler", FIX],
    "BatchSampledVal": ["batch sampler's sampler is a RandomSampler", FIX],
    "DistributedVal": ["DistributedSampler with shuffle=True", "DistributedSampler(..., shuffle=False)"],
    "ResumableVal": ["EpochPermutation, which orders each epoch anew", FIX],
    "DrawnVal": ["__getitem__ draws at random", "from a fixed seed"],
    "PythonDrawnVal": ["__getitem__ draws at random", "from a fixed seed"],
    "RedrawnVal": ["(Permutation) hands out another order at the next validation", "a SequentialSampler"],
    "EpochSeededVal": ["(Permutation) hands out another order at the next validation", "a SequentialSampler"],
    "ShuffledValStream": ["validation stream hand out", "from a fixed seed"],
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_validation_loader_that_shuffles_or_draws_fails_naming_it(name):
    result = checks.val_order(None, build(getattr(val_forks, name)), config(16))
    assert result.status == checks.FAIL, result
    assert all(words in result.detail for words in PLANTED[name]), result.detail
    assert "val loss" in result.detail and len(result.detail) <= DETAIL, result.detail


def test_a_shuffled_loader_is_named_even_where_two_reads_agree():
    """One validation example: every order is the same, and the sampler is still a shuffle waiting to happen."""
    data = build(val_forks.ShuffledVal)
    data.val_dataset = Subset(data.val_dataset, [0])
    result = checks.val_order(None, data, config(16))
    assert result.status == checks.FAIL and "RandomSampler" in result.detail, result


def test_a_shuffle_from_the_global_generator_is_caught_right_after_seeding():
    """The run seeds the global generators before the preflight; no one seeds them again between validations."""
    data = build(val_forks.RedrawnVal)
    torch.manual_seed(0)
    assert checks.val_order(None, data, config(16)).status == checks.FAIL


def _same_state(a: dict, b: dict) -> bool:
    numpy_a, numpy_b = a["numpy"], b["numpy"]
    return (
        torch.equal(a["torch"], b["torch"])
        and a["python"] == b["python"]
        and torch.equal(numpy_a[1], numpy_b[1])
        and numpy_a[2:] == numpy_b[2:]
    )


class _OwnGenerator(PaddedLM):
    """A correct validation loader that holds a generator of the datamodule's (each pass draws a worker seed)."""

    def val_dataloader(self) -> DataLoader:
        if not hasattr(self, "generator"):
            self.generator = torch.Generator().manual_seed(0)
        return DataLoader(
            self.val_dataset, self.batch_size, collate_fn=self.collate, generator=self.generator
        )


@pytest.mark.parametrize(
    "cls", [val_forks.DrawnVal, val_forks.RedrawnVal, _OwnGenerator], ids=lambda c: c.__name__
)
def test_the_row_puts_back_every_generator_it_draws_from(cls):
    """Training after the preflight starts as if the row never read: the global generators and the loader's own."""
    data = build(cls)
    np.random.seed(1)
    before = rng_state()
    own = data.val_dataloader().generator
    own_before = None if own is None else own.get_state()
    checks.val_order(None, data, config(16))
    assert _same_state(before, rng_state())
    assert own is None or torch.equal(own.get_state(), own_before)


@pytest.mark.parametrize(
    "make",
    [
        lambda: build(PaddedLM),
        lambda: build(StreamingLM),  # a stream read by 2 workers, sharded: one order, read twice
        lambda: build(
            val_forks.PermutedVal
        ),  # a fixed order of its own (not the index order): the same every time
    ],
    ids=["PaddedLM", "StreamingLM", "fixed-permutation"],
)
def test_correct_fork_loaders_pass(make):
    result = checks.val_order(None, make(), config(16))
    assert result.status == checks.PASS and "in the same order" in result.detail, result


def _synthetic(root):
    return SyntheticDataModule(length=16, size=64, val_size=16, root=str(root))


def _folder(root):
    written = _synthetic(root)
    written.prepare_data()  # the synthetic generator writes the format data=folder reads
    return FolderDataModule(path=str(written.dataset_dir), length=16)


def _corpus(root):
    text = root / "text.txt"
    text.write_text(" ".join(f"line {i} of a small corpus, read in windows." for i in range(400)))
    return CorpusDataModule(length=16, files=str(text), tokenizer={"kind": "char"}, workers=1, root=str(root))


@pytest.mark.parametrize(
    "make",
    [_synthetic, lambda root: TextDataModule(length=16, root=str(root)), _folder, _corpus],
    ids=["synthetic", "text", "folder", "corpus"],
)
def test_builtin_sources_pass(make, tmp_path):
    data = make(tmp_path)
    data.prepare_data()
    data.setup()
    result = checks.val_order(None, data, config(16))
    assert result.status == checks.PASS and "in the same order" in result.detail, result


class _NoVal:
    tokenizer = None


class _NoneVal(_NoVal):
    def val_dataloader(self):
        return None


@pytest.mark.parametrize("data", [_NoVal(), _NoneVal()], ids=["no-val_dataloader", "val_dataloader-None"])
def test_no_validation_loader_is_not_judged(data):
    result = checks.val_order(None, data, config(16))
    assert result.status == checks.SKIP and "not judged" in result.detail, result


def test_the_preflight_fails_the_shuffled_validation_in_this_row_alone():
    """The table holds the row, and a shuffled validation loader is no other row's fault."""
    rows = preflight(build(val_forks.ShuffledVal), 16)
    assert rows["val_order"]["status"] == checks.FAIL, rows["val_order"]
    failed = {name for name, row in rows.items() if row["status"] == checks.FAIL}
    assert failed == {"val_order"}, {name: rows[name]["detail"] for name in failed}


@pytest.mark.slow
def test_a_run_with_a_shuffled_validation_loader_stops_at_the_preflight(run_train, tmp_path):
    """Through the real train.py, the fork's datamodule plugged in by its config (tests/conf/data/fork.yaml)."""
    result = run_train(
        f"hydra.searchpath=[file://{TESTS_CONF}]",
        "data=fork",
        "probes=off",
        "data._target_=tests.checks.data.val_forks.ShuffledVal",
        "mode=overfit",
        "n=2",
    )
    assert result.returncode == 3, result.stderr[-2000:]
    rows = {c["name"]: c for c in read_verdict(tmp_path / "run")["checks"]}
    assert rows["val_order"]["status"] == checks.FAIL and FIX in rows["val_order"]["detail"], rows[
        "val_order"
    ]
