"""TextDataModule: a text file cut into language-modelling examples in the one format on disk. With no `path`,
the CPython documentation that ships in its standard library (`pydoc_data.topics`, ~465k characters)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.config.groups.data import held_out_fraction
from harness.data.dataset import DiskDataModule
from harness.data.format import excerpt
from harness.errors import ConfigError


def builtin_corpus() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[key] for key in sorted(topics))


def _read_corpus(path: str | None) -> tuple[str, str]:
    """(name, text) of the corpus at `path`, or of the built-in one."""
    if path is None:
        return "pydoc-topics", builtin_corpus()
    file = Path(path).expanduser()
    fix = "point data.path at a UTF-8 text file, or set data.path=null for the built-in corpus"
    if not file.is_file():
        raise ConfigError("data.path", path, f"no such file; {fix}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "data.path", path, f"not UTF-8 text ({err.reason} at byte {err.start}); {fix}"
        ) from None
    if not text:
        raise ConfigError("data.path", path, f"the file is empty; {fix}")
    return file.stem, text


class TextDataModule(DiskDataModule):
    """Next-character prediction on non-overlapping chunks of `length + 1` characters; the first `1 -
    val_fraction` of the corpus trains, the rest validates."""

    def __init__(
        self,
        length: int,
        path: str | None = None,
        alphabet: str | None = None,
        val_fraction: float = 0.1,
        batch_size: int = 32,
        root: str = "data",
        num_workers: int = 0,
    ):
        super().__init__(length=length, batch_size=batch_size, root=root, num_workers=num_workers)
        held_out_fraction(val_fraction)
        self.path, self.val_fraction = path, val_fraction
        self.name, self.text = _read_corpus(path)
        unknown = sorted(set(self.text) - set(alphabet)) if alphabet is not None else []
        if unknown:
            raise ConfigError(
                "data.alphabet",
                repr(alphabet),
                f"the corpus ({path or 'the built-in one'}) holds characters outside it, "
                f"{excerpt(''.join(unknown))}; add them, or set data.alphabet=null to use the corpus's own",
            )
        self.alphabet = alphabet if alphabet is not None else "".join(sorted(set(self.text)))
        chunks = len(self.text) // (length + 1)
        if chunks < 2:
            raise ConfigError(
                "data.length",
                length,
                f"the corpus ({len(self.text)} characters) holds fewer than 2 "
                f"examples of {length + 1} characters; use a shorter data.length or a longer file",
            )
        tag = hashlib.sha256((self.text + "|" + self.alphabet).encode()).hexdigest()[:8]
        self.dataset_dir = self.root / "text" / f"{self.name}-L{length}-v{val_fraction}-{tag}"

    def build(self):
        step = self.length + 1
        chunks = [{"text": self.text[i : i + step]} for i in range(0, len(self.text) - step + 1, step)]
        n_val = max(1, round(len(chunks) * self.val_fraction))
        splits = {"train": chunks[:-n_val], "val": chunks[-n_val:]}
        source = {"corpus": self.name, "path": self.path, "characters": len(self.text)}
        return splits, "lm", self.alphabet, source
