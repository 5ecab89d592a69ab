"""Errors the user can fix. Each one reads as one line: the key or file, the bad value, and the fix."""


class ConfigError(ValueError):
    """A bad config value or input file, found before any work is done. The CLI exits 2 on it."""

    def __init__(self, key: str, value: object, fix: str):
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value}: {' '.join(str(fix).split())}")  # one line, whatever the cause said
