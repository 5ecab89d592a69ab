"""FolderDataModule: a dataset folder of your own in the one format on disk (harness.data.format), refused,
never rebuilt, where its checksums do not match."""

from __future__ import annotations

from pathlib import Path

from harness.data.dataset import DiskDataModule
from harness.data.format import CorruptDataset, check_complete, read_meta
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
                "data.path",
                path,
                f"not a dataset folder ({_without_folder_path(err, self.dataset_dir)}); {fix}",
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
            check_complete(self.dataset_dir)
        except CorruptDataset as err:
            raise ConfigError(
                "data.path",
                self.dataset_dir,
                f"the dataset is corrupt: {_without_folder_path(err, self.dataset_dir)}; restore it from its source",
            ) from None

    def setup(self, stage: str | None = None) -> None:
        """Every record checked against the format (harness.data.format.read_split); a fault is one line
        naming the file, the line and what is wrong."""
        if self.train_dataset is not None:
            return
        try:
            self.load()
        except CorruptDataset as err:
            raise ConfigError(
                "data.path",
                self.dataset_dir,
                f"{_without_folder_path(err, self.dataset_dir)}; fix that line (or write the folder again with "
                "harness.data.format.write_dataset)",
            ) from None
        for split, name in (("train", "training"), ("val", "validation")):
            if not len(getattr(self, f"{split}_dataset")):
                raise ConfigError(
                    "data.path",
                    self.dataset_dir,
                    f"{split}.jsonl holds no examples; a dataset needs at least one {name} example",
                )


def _without_folder_path(err: CorruptDataset, folder: Path) -> str:
    """The fault with the folder's path left out: the error names the folder once, as data.path."""
    return str(err).replace(f"{folder}/", "").replace(str(folder), "the folder")
