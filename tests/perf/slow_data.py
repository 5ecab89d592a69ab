"""A planted slow loader: the synthetic data whose training examples each take `sleep_s` to read, as a dataset
that decodes in __getitem__ does (`data._target_=tests.perf.slow_data.SlowSynthetic +data.sleep_s=0.003`)."""

from __future__ import annotations

import time

from torch.utils.data import Dataset

from harness.data import SyntheticDataModule


class SlowItems(Dataset):
    """`dataset`, each item read after `sleep_s` seconds."""

    def __init__(self, dataset, sleep_s: float):
        self.dataset, self.sleep_s = dataset, sleep_s

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        time.sleep(self.sleep_s)
        return self.dataset[i]

    def record(self, i: int) -> dict:
        return self.dataset.record(i)


class SlowSynthetic(SyntheticDataModule):
    """SyntheticDataModule whose training split reads slowly; its validation split as fast as ever."""

    def __init__(self, *args, sleep_s: float = 0.003, **kwargs):
        super().__init__(*args, **kwargs)
        self.sleep_s = sleep_s

    def load(self) -> None:
        super().load()
        self.train_dataset = SlowItems(self.train_dataset, self.sleep_s)
