"""CheckResult and its statuses, and SampleBatch: the batch the model checks run on."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.data.batch import first_examples

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
#: a check that could not judge: what it needs is broken, and the row that says how is named in its detail
SKIP = "SKIP"


@dataclass
class CheckResult:
    """One preflight row: the check's `name`, its `status` (PASS, WARN, FAIL; SKIP: could not judge) and a
    one-line `detail`."""

    name: str
    status: str  # PASS | WARN | FAIL | SKIP
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


class SampleBatch(dict):
    """A Batch that keeps the passes the model checks share over it (`passes`), and `unusable`: why no model
    can be judged on it (None: it can). A plain dict works too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes: dict = {}
        self.unusable: str | None = None


def sample_batch(dataset, size: int = 4) -> SampleBatch:
    """The first `size` examples of `dataset`, collated into a Batch by default_collate."""
    return SampleBatch(first_examples(dataset, size))


def brief_list(values, limit: int = 6) -> str:
    """The first `limit` of `values` as text, with their count where there are more."""
    values = list(values)
    head = ", ".join(str(v) for v in values[:limit])
    return head + (f", ... ({len(values)} in all)" if len(values) > limit else "")
