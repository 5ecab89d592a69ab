"""A check's result and its statuses, and the sample batch the model checks run on (SampleBatch: a Batch that
keeps the passes they share, harness.checks.model.passes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.data.batch import first_examples

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
#: a check that could not judge: what it needs is broken, and the row that says how is named in its detail
SKIP = "SKIP"


@dataclass
class CheckResult:
    name: str
    status: str  # PASS | WARN | FAIL | SKIP
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


class SampleBatch(dict):
    """A Batch that keeps the passes checks share over it (see `shared`). Any dict Batch works as well:
    then each check runs its own passes. `unusable`: why no model can be judged on it (None: it can)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passes: dict = {}
        self.unusable: str | None = None


def sample_batch(dataset, size: int = 4) -> SampleBatch:
    """The first `size` examples of `dataset`, collated into a Batch by default_collate."""
    return SampleBatch(first_examples(dataset, size))


def shown(values, limit: int = 6) -> str:
    values = list(values)
    head = ", ".join(str(v) for v in values[:limit])
    return head + (f", ... ({len(values)} in all)" if len(values) > limit else "")
