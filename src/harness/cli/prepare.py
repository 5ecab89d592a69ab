"""`python -m harness.cli.prepare data=corpus data.files='books/*.txt'`: a dataset made ready without training
(`main`). A corpus is tokenized into shards without torch or Lightning, another source by its
datamodule's prepare_data(). A config mistake exits 2."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from harness.errors import ConfigError


def main(argv: list[str] | None = None) -> None:
    """The command: _prepare, a signal ending it with one line and exit 128 + its number."""
    from harness.signals import run_guarded

    run_guarded(lambda: _prepare(argv))


def _prepare(argv: list[str] | None = None) -> None:
    """Compose conf/ with `argv`'s overrides (default: sys.argv's) and prepare its data; prints its folder."""
    from hydra import compose, initialize_config_dir

    from harness.config import build
    from harness.config.explain import base_of, explain
    from harness.data.sources.corpus import corpus_of
    from harness.errors import die
    from harness.tasks.validate import validate

    overrides = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    conf = Path(__file__).resolve().parents[3] / "conf"  # src/harness/cli/prepare.py -> the repository
    with initialize_config_dir(config_dir=str(conf), version_base="1.3", job_name="prepare"):
        try:
            cfg = compose(config_name="train", overrides=overrides)
        except Exception as err:  # the keys to list are those of the groups chosen (data=corpus's)
            die(explain(err, overrides, base_of(overrides, [])), err)
    try:
        validate(cfg, devices=False)
        data = corpus_of(cfg.data) or build(cfg.data, "data")  # a corpus, or another source's datamodule
        if hasattr(data, "prepare"):
            data.prepare()
        else:
            data.prepare_data()
        folder = getattr(data, "dataset_dir", None)  # every built-in source has one; a fork's may not
    except ConfigError as err:
        die(str(err), err)
    print(folder or "prepared")


if __name__ == "__main__":
    main()
