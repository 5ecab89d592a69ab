"""Where each planted data mistake of tests/forks/data/ must show in the preflight: the row it fails with the
words that name its cause, the rows that may echo it, the length it shows at; and the preflight itself, run on
a fork's datamodule, or on one whose loaders hand out a batch a test has planted a value in (_Fixed)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from harness import checks
from harness.checks.preflight import run_preflight
from harness.models.transformer import Transformer
from harness.train.module import HarnessModule

#: planted mistake -> (the row that fails, words its detail must hold: the cause named)
CAUGHT = {
    "PadCountedLM": ("loss_mask", ["counts padding", "pad id"]),
    "PadCountedFromInputsLM": ("loss_mask", ["counts padding", "pad id"]),
    "EosPaddedLM": ("loss_mask", ["counts padding", "end-of-text"]),
    "ValIsTrain": ("split_overlap", ["train_dataset itself"]),
    "ValSliceOfTrain": ("split_overlap", ["100%", "training examples too"]),
    "OverlappingWindowsLM": ("split_overlap", ["inside training text"]),
    "SameBatchSampler": ("train_loader", ["identical", "same indices"]),
    "IgnoresIndexDataset": ("train_loader", ["identical", "ignores its index"]),
    "LabelFirstClassification": ("loss_mask", ["position 0", "read 1 of its"]),
    "LabelOffByOneClassification": (
        "loss_mask",
        ["the label is predicted at position", "whole text has been read"],
    ),
    "UnshardedStreamingLM": ("train_loader", ["the workers read the same examples", "get_worker_info"]),
    "EosEqualsVocabSize": ("ids_in_range", ["eos_id", "vocab_size"]),
    "TargetsAreInputsLM": ("data_roundtrip", ["the inputs themselves"]),
    "ShiftedByTwoLM": ("data_roundtrip", ["shifted by 2"]),
    "LabelInInputClassification": ("data_roundtrip", ["label is inside the input"]),
    "TimeMajorCollate": ("batch_format", ["time-major"]),
    "OtherVocabularyOrder": ("data_roundtrip", ["another vocabulary"]),
    "EmptyLossMask": ("loss_mask", ["False at every position"]),
    "MutatingValLoader": ("static_batches", ["differs between two passes"]),
    "EosNotLearnedLM": ("data_roundtrip", ["loss mask ends 1 position before", "never learned"]),
    "EmptyValLoader": ("batch_format", ["val loader hands out no batch", "drop_last"]),
    "Int32Targets": ("batch_format", ["torch.int32", ".long()"]),
    "PadCountedRecordsLM": ("loss_mask", ["counts padding", "pad id"]),
    "EosMaskedAsPadLM": (
        "special_tokens",
        ["key 'loss_mask'", "never learns to stop", "pad id is the eos id"],
    ),
    "DoubledBosLM": ("special_tokens", ["key 'input_ids'", "positions 0 and 1", "add_special_tokens=False"]),
    "EosSometimesLM": (
        "special_tokens",
        ["key 'targets'", "no end of text", "padded examples read end with one"],
    ),
}
#: rows that may fail beside the cause's own, each pointing back at it
ECHOES = {
    "IgnoresIndexDataset": {
        "data_roundtrip": "ignores its index"
    },  # its rows are one example: no source fits
    "TimeMajorCollate": {"data_roundtrip": "time-major"},
    # a second read is out of the vocabulary, and two validations read other examples: true, and said
    "MutatingValLoader": {"ids_in_range": "negative", "val_order": "static_batches names the key"},
    # re-seeded for every batch, so for every epoch too: the same order, true, and said
    "SameBatchSampler": {"epoch_order": "re-seeded alike every pass"},
    # the end of text out of the loss: the round trip sees the mask end early, special_tokens no eos ever learned
    "EosNotLearnedLM": {"special_tokens": "never learns to stop"},
    "EosMaskedAsPadLM": {"data_roundtrip": "never learned"},
}
#: mistakes that leave no batch a model can run: every model check is SKIP, pointing at the row that says why
UNRUNNABLE = {
    "EosEqualsVocabSize": "see ids_in_range",
    "EmptyLossMask": "see loss_mask",
    "Int32Targets": "see batch_format",
}
#: a length where the mistake shows (validation windows found at other offsets need long examples; every text padded),
#: or where a correct pipeline is most likely to raise a false alarm (max-length padding sharing long runs of pads, a
#: tiny vocabulary at a tiny length sharing examples by chance, a few documents cut short of the row, then padded)
LENGTHS = {
    "OverlappingWindowsLM": 128,
    "MaxLengthPaddedLM": 128,
    "TinyIIDLM": 2,
    "EosSometimesLM": 64,
    "CutThenPaddedLM": 36,
}
MODEL_ROWS = {check.__name__ for check in checks.MODEL_CHECKS}
#: the longest detail a row may print: a few positions and values, never whole tensors
DETAIL = 400


def config(length: int):
    return OmegaConf.create({"preflight": True, "seed": 0, "optim": {"lr": 3e-3}, "data": {"length": length}})


def preflight(data, length: int) -> dict[str, dict]:
    """The real preflight on a small transformer over `data`: its rows by name."""
    torch.manual_seed(0)
    model = Transformer(data.tokenizer.vocab_size, max_len=length, d_model=32, layers=1, heads=2)
    rows = run_preflight(HarnessModule(model), data, config(length))
    return {row["name"]: row for row in rows}


class _Fixed:
    """A datamodule whose loaders hand out one given batch: a planted value exactly where a test puts it."""

    def __init__(self, data, batch: dict):
        self.tokenizer, self.train_dataset, self.val_dataset = (
            data.tokenizer,
            data.train_dataset,
            data.val_dataset,
        )
        self.batch = batch

    def train_dataloader(self):
        return [self.batch]

    def val_dataloader(self):
        return [self.batch]
