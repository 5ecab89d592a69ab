"""Every data check of the preflight catches the bug it claims to catch, planted in minimal datamodule-like objects
(real DataLoaders, a real CharTokenizer): in-place mutation, targets not shifted, records that disagree with
the tensors; and the bug-free ones pass."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from harness import checks
from harness.checks import FAIL, PASS
from harness.data import CharTokenizer, SyntheticDataModule

CFG = {"seed": 0}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


# ---------------------------------------------------------------------------------------------------------
# 1b. data bugs: minimal datamodule-like objects with real DataLoaders and a real CharTokenizer
# ---------------------------------------------------------------------------------------------------------

LENGTH = 8
TEXTS = ["the cat!", "a dog r.", "big hats", "red fox?", "wet sand", "old mill", "hot tea.", "sun set!"]
TEXTS = [text + "@" for text in TEXTS]  # length + 1 characters; the last two always differ
TOKENIZER = CharTokenizer("".join(sorted(set("".join(TEXTS)))))


class LMDataset(Dataset):
    """Language-modelling records {"text": length + 1 chars} -> Batch rows; record(i) is the source of row i."""

    def __init__(self, texts: list[str], shift: bool = True):
        self.records = [{"text": text} for text in texts]
        ids = torch.tensor([TOKENIZER.encode(text) for text in texts], dtype=torch.long)
        self.input_ids = ids[:, :-1].clone()
        self.targets = (ids[:, 1:] if shift else ids[:, :-1]).clone()  # shift=False: the planted bug

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return {
            "input_ids": self.input_ids[i],
            "targets": self.targets[i],
            "loss_mask": torch.ones(LENGTH, dtype=torch.bool),
        }

    def record(self, i):
        return self.records[i]


class MutatingDataset(LMDataset):
    """BUG: every read increments the stored targets in place, so the same index never reads the same."""

    def __getitem__(self, i):
        self.targets[i].add_(1).remainder_(TOKENIZER.vocab_size)
        return super().__getitem__(i)


class MisalignedRecords(LMDataset):
    """BUG: record(i) is the source of row i + 1."""

    def record(self, i):
        return self.records[(i + 1) % len(self.records)]


class LoaderModule:
    """What the data checks use of a datamodule: train/val loaders over datasets, and a tokenizer."""

    def __init__(self, train: Dataset, val: Dataset, shuffle_train: bool = False, batch_size: int = 2):
        self.train_dataset, self.val_dataset, self.tokenizer = train, val, TOKENIZER
        self.shuffle_train, self.batch_size = shuffle_train, batch_size

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        return DataLoader(
            self.train_dataset, batch_size=self.batch_size, shuffle=self.shuffle_train, generator=generator
        )

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=self.batch_size, shuffle=False)


def clean_module(shuffle_train: bool = False) -> LoaderModule:
    return LoaderModule(LMDataset(TEXTS[:6]), LMDataset(TEXTS[6:]), shuffle_train=shuffle_train)


@pytest.mark.parametrize("shuffle_train", [False, True], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("check", checks.DATA_CHECKS, ids=lambda c: c.__name__)
def test_bug_free_loaders_pass(check, shuffle_train):
    result = check(None, clean_module(shuffle_train), CFG)
    assert result.status == PASS, result


def test_static_batches_catches_in_place_mutation():
    data = LoaderModule(LMDataset(TEXTS[:6]), MutatingDataset(TEXTS[6:]))
    result = checks.static_batches(None, data, CFG)
    assert result.status == FAIL, result
    # input_ids and loss_mask sort before targets and are static: the detail must single out targets
    assert "val loader" in result.detail and "key 'targets'" in result.detail, result.detail


def test_static_batches_lets_a_declared_key_vary():
    allowed = checks.static_batches(
        None,
        LoaderModule(LMDataset(TEXTS[:6]), MutatingDataset(TEXTS[6:])),
        {"seed": 0, "static_batches_vary": ["targets"]},
    )
    assert allowed.status == PASS, allowed


ROUNDTRIP_BUGS = [
    pytest.param(
        lambda: LoaderModule(LMDataset(TEXTS[:6], shift=False), LMDataset(TEXTS[6:])),
        ("train example 0", "inputs themselves"),
        id="targets-not-shifted",
    ),
    pytest.param(  # read through the shuffled loader's own sampler: the row names the example it holds
        lambda: LoaderModule(LMDataset(TEXTS[:6], shift=False), LMDataset(TEXTS[6:]), shuffle_train=True),
        ("train example ", "inputs themselves"),
        id="targets-not-shifted-behind-a-shuffled-loader",
    ),
    pytest.param(
        lambda: LoaderModule(LMDataset(TEXTS[:6]), MisalignedRecords(TEXTS[6:])),
        ("val example 0", "example 1's source"),
        id="record-disagrees-with-tensors",
    ),
]


@pytest.mark.parametrize(("make", "named"), ROUNDTRIP_BUGS)
def test_data_roundtrip_catches_broken_decoding(make, named):
    result = checks.data_roundtrip(None, make(), CFG)
    assert result.status == FAIL, result
    assert all(words in result.detail for words in named), result.detail


def test_classification_of_length_one(tmp_path):
    data = SyntheticDataModule(length=1, size=4, val_size=2, root=str(tmp_path))
    data.prepare_data()
    data.setup()
    result = checks.data_roundtrip(None, data, CFG)
    assert result.status == PASS, result
