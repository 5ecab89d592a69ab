"""Real data already in the harness's format: a dataset folder you made (see harness.data.format).

Nothing here is regenerated: a folder whose checksums do not match is refused, not rebuilt."""

from __future__ import annotations

from pathlib import Path

from harness.data.dataset import DiskDataModule
from harness.data.format import CorruptDataset, check_whole, read_meta
from harness.errors import ConfigError


class FolderDataModule(DiskDataModule):
    """Reads `path/meta.json`, `path/train.jsonl`, `path/val.jsonl` as written by `write_dataset`."""

    regenerate_if_corrupt = False

    def __init__(self, path: str, length: int, batch_size: int = 32, num_workers: int = 0):
        super().__init__(length=length, batch_size=batch_size, root=str(path), num_workers=num_workers)
        self.dataset_dir = Path(path).expanduser()
        fix = "point data.path at a folder written by harness.data.format.write_dataset"
        try:
            meta = read_meta(self.dataset_dir)
        except CorruptDataset as err:
            raise ConfigError(
                "data.path", path, f"not a dataset folder ({short(err, self.dataset_dir)}); {fix}"
            ) from None
        if meta["length"] != length:
            raise ConfigError(
                "data.length",
                length,
                f"the dataset at {path} holds examples of length {meta['length']}; "
                f"set data.length={meta['length']}",
            )

    def prepare_data(self) -> None:
        try:
            check_whole(self.dataset_dir)
        except CorruptDataset as err:
            raise ConfigError(
                "data.path",
                self.dataset_dir,
                f"the dataset is corrupt: {short(err, self.dataset_dir)}; restore it from its source",
            ) from None

    def setup(self, stage: str | None = None) -> None:
        """Every record checked against the format (harness.data.format.read_split): a fault is one line naming
        the folder, the file and line, and what is wrong there."""
        if self.train_dataset is not None:
            return
        try:
            self.load()
        except CorruptDataset as err:
            raise ConfigError(
                "data.path",
                self.dataset_dir,
                f"{short(err, self.dataset_dir)}; fix that line (or write the folder again with "
                "harness.data.format.write_dataset)",
            ) from None
        for split, name in (("train", "training"), ("val", "validation")):
            if not len(getattr(self, f"{split}_dataset")):
                raise ConfigError(
                    "data.path",
                    self.dataset_dir,
                    f"{split}.jsonl holds no examples; a dataset needs at least one {name} example",
                )


def short(err: CorruptDataset, folder: Path) -> str:
    """The fault with the folder's own path left out of it: the error names the folder once, as data.path."""
    return str(err).replace(f"{folder}/", "").replace(str(folder), "the folder")
