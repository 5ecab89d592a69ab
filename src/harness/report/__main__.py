"""`python -m harness.report DIR` (`main`): a run dir's report.html, or a sweep dir's summary, plots and page,
rebuilt, a signal ending it in one line. A run dir holds verdict.json or .hydra/, a sweep dir job dirs; a folder
that is neither is one line, exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

USAGE = "usage: python -m harness.report DIR   (a run dir, outputs/runs/<date>/<time>, or a sweep dir, outputs/multirun/<date>/<time>)"


def _is_run(folder: Path) -> bool:
    return (folder / "verdict.json").exists() or (folder / ".hydra").is_dir()


def main(argv: list[str]) -> int:
    """The command; returns the exit code (2: not a run or sweep dir, 1: it cannot be written)."""
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
    """Rebuild `folder`'s page, or its summary and page; the exit code."""
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


if __name__ == "__main__":
    from harness.signals import run_guarded

    run_guarded(lambda: sys.exit(main(sys.argv[1:])))
