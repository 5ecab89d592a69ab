"""python -m harness.report DIR: rebuild what a run or a sweep leaves for a person to read.

    python -m harness.report outputs/runs/<date>/<time>         # a run's page, report.html
    python -m harness.report outputs/multirun/<date>/<time>     # a sweep's summary.md/.csv, plots and report.html

A run dir holds verdict.json or .hydra/; a sweep dir holds job dirs. A run dir whose files are damaged still gets its
page, which says what is missing; a folder that is neither is one line, exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

USAGE = "usage: python -m harness.report DIR   (a run dir, outputs/runs/<date>/<time>, or a sweep dir, outputs/multirun/<date>/<time>)"


def _is_run(folder: Path) -> bool:
    return (folder / "verdict.json").exists() or (folder / ".hydra").is_dir()


def main(argv: list[str]) -> int:
    """Rebuild the page of a run dir, or the summary and page of a sweep dir; exit 2 on a path that is neither, 1
    where it cannot be written."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    if not folder.is_dir():
        print(
            f"error: {folder}: no such directory; give a run dir or a sweep dir ({USAGE[7:]})",
            file=sys.stderr,
        )
        return 2
    try:
        return rebuilt(folder)
    except OSError as err:  # a folder that cannot be written to (read-only, a page path that is a folder)
        print(f"error: {folder}: cannot write there ({type(err).__name__}: {err})", file=sys.stderr)
        return 1


def rebuilt(folder: Path) -> int:
    from harness.report.run_page import write_run_page
    from harness.report.summary import collect, write_summary

    if _is_run(folder):
        print(f"written: {write_run_page(folder)}")
        return 0
    jobs = collect(folder)
    if not jobs:
        print(
            f"error: {folder}: neither a run dir (verdict.json or .hydra/ in it) nor a sweep dir (job dirs holding "
            ".hydra/ or verdict.json); give outputs/runs/<date>/<time> or outputs/multirun/<date>/<time>",
            file=sys.stderr,
        )
        return 2
    written = write_summary(folder, jobs)
    print(written["md"].read_text())
    print("written: " + ", ".join(str(p) for p in written.values()))
    return 0
