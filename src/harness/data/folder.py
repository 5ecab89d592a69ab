"""Real data already in the harness's format: a dataset folder you made (see harness.data.format).

Nothing here is regenerated: a folder whose checksums do not match is refused, not rebuilt."""

from __future__ import annotations

from pathlib import Path

from harness.data.dataset import DiskDataModule
from harness.data.format import CorruptDataset, is_whole, read_meta
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
            raise ConfigError("data.path", path, f"not a dataset folder ({err}); {fix}") from None
        if meta["length"] != length:
            raise ConfigError(
                "data.length",
                length,
                f"the dataset at {path} holds examples of length {meta['length']}; "
                f"set data.length={meta['length']}",
            )

    def prepare_data(self) -> None:
        if not is_whole(self.dataset_dir):
            raise ConfigError(
                "data.path",
                self.dataset_dir,
                "the dataset is truncated or corrupt (checksum mismatch in "
                "meta.json); restore it from its source",
            )
