"""What the door's tests share: the one line check_overrides prints for overrides it refuses, exit 2."""

from __future__ import annotations

import pytest

from harness.cli.overrides import check_overrides
from tests.conftest import CONF


def refused(capsys, *overrides: str) -> str:
    """The one line check_overrides prints for `overrides` as it exits 2."""
    with pytest.raises(SystemExit) as stop:
        check_overrides(list(overrides), CONF)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]
