"""Records on disk -> tensors of the Batch contract, and the datamodule every data source shares."""

from __future__ import annotations

import errno
import logging
import shutil
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from harness.data.format import CorruptDataset, excerpt, read_meta, read_split
from harness.data.sampler import ResumableLoader
from harness.data.tokenizer import CharTokenizer, Tokenizer

log = logging.getLogger(__name__)


def _encode_records(records: list[dict], tokenizer: Tokenizer, task: str, length: int) -> dict:
    """Records as Batch tensors [examples, length]: lm, the targets the inputs shifted by one, all in the
    mask; classify, only the last position (the label) in the mask."""
    ids = []
    for record in records:
        tokens = tokenizer.encode(record["text"] + record.get("label", ""))
        if len(tokens) != length + 1:
            raise CorruptDataset(
                f"record {excerpt(record['text'])} encodes to {len(tokens)} tokens, expected {length + 1}"
            )
        ids.append(tokens)
    ids = torch.tensor(ids, dtype=torch.long).reshape(len(records), length + 1)
    input_ids, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    loss_mask = torch.ones_like(input_ids, dtype=torch.bool)
    if task == "classify":
        loss_mask[:, :-1] = False
        targets = torch.where(loss_mask, targets, torch.zeros_like(targets))
    return {"input_ids": input_ids, "targets": targets, "loss_mask": loss_mask}


class CharDataset(Dataset):
    """A split held as tensors: items are dicts of the Batch keys without the batch axis; `record(i)`, item
    i's source record."""

    def __init__(self, records: list[dict], tokenizer: Tokenizer, task: str, length: int):
        self.records, self.task = records, task
        self.tensors = _encode_records(records, tokenizer, task, length)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        return {key: value[i] for key, value in self.tensors.items()}

    def record(self, i: int) -> dict:
        return self.records[i]


class DiskDataModule(pl.LightningDataModule):
    """A dataset folder at `dataset_dir`, made on first use by the subclass's `build() -> (splits, task,
    alphabet, source)`; `setup()` loads its tokenizer and datasets."""

    regenerate_if_corrupt = True  # generated data is rebuilt; real data is refused with an error
    dataset_dir: Path

    def __init__(self, length: int, batch_size: int, root: str, num_workers: int = 0):
        super().__init__()
        self.length, self.batch_size, self.root, self.num_workers = (
            length,
            batch_size,
            Path(root),
            num_workers,
        )
        # the shuffling seed comes from the run's seeded generator: same run seed, same order
        self.shuffle_seed = int(torch.randint(2**31 - 1, ()))
        self.tokenizer: Tokenizer | None = None  # CharTokenizer here; CorpusDataModule's may be any
        self.train_dataset: CharDataset | None = None
        self.val_dataset: CharDataset | None = None

    def build(self) -> tuple[dict[str, list[dict]], str, str, dict]:
        raise NotImplementedError

    def prepare_data(self) -> None:
        from harness.data.format import is_complete

        if self.dataset_dir.exists():
            if is_complete(self.dataset_dir):
                return
            if not self.regenerate_if_corrupt:
                raise CorruptDataset(f"{self.dataset_dir}: not a whole dataset; restore it from its source")
            log.warning("%s is truncated or corrupt: regenerating it", self.dataset_dir)
            shutil.rmtree(self.dataset_dir, ignore_errors=True)
        self.generate()

    def generate(self) -> None:
        """build() written to dataset_dir; a data.root that cannot be written is a config error, named."""
        from harness.data.format import write_dataset
        from harness.errors import ConfigError

        splits, task, alphabet, source = self.build()
        try:
            write_dataset(
                self.dataset_dir, splits, task=task, alphabet=alphabet, length=self.length, source=source
            )
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise ConfigError(
                "data.root",
                self.root,
                f"cannot write the dataset there ({err.strerror}); give a writable folder, "
                "e.g. data.root=data (or set HARNESS_DATA_DIR)",
            ) from None

    def setup(self, stage: str | None = None) -> None:
        if self.train_dataset is not None:
            return
        try:
            self.load()
        except CorruptDataset as err:  # a cache whose checksums match but whose content does not: made again
            if not self.regenerate_if_corrupt:
                raise
            log.warning("%s is unreadable (%s): regenerating it", self.dataset_dir, err)
            shutil.rmtree(self.dataset_dir, ignore_errors=True)
            self.generate()
            self.load()

    def load(self) -> None:
        """The tokenizer and both splits from dataset_dir, every record checked (harness.data.format)."""
        meta = read_meta(self.dataset_dir)
        self.tokenizer = CharTokenizer(meta["alphabet"])
        self.train_dataset, self.val_dataset = (
            CharDataset(read_split(self.dataset_dir, split, meta), self.tokenizer, meta["task"], self.length)
            for split in ("train", "val")
        )

    def train_dataloader(self) -> DataLoader:
        return ResumableLoader(
            self.train_dataset,
            batch_size=self.batch_size,
            seed=self.shuffle_seed,
            drop_last=len(self.train_dataset) > self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.val_dataset,
            batch_size=self.batch_size,
            shuffle=False,
            generator=torch.Generator(),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )
