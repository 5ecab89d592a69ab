"""What the tests of the declared keys share: the config composed with overrides, and a declaration's refusal."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from harness.config.declare import check_declared
from harness.errors import ConfigError
from tests.conftest import CONF


def composed(*overrides: str):
    """conf/train.yaml composed with `overrides`, as the door composes a job."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def refused_in_one_line(overrides: str, name: str, words: str) -> str:
    """The one line the declarations refuse `overrides` with: it names `name` and says `words`."""
    with pytest.raises(ConfigError) as err:
        check_declared(composed(*overrides.split()))
    message = str(err.value)
    assert message.startswith(f"{name}=") and words in message and "\n" not in message, message
    return message
