"""Rename the package of this template: `make rename NAME=mylab` (or `python scripts/rename.py mylab`).

Moves src/<old>/ to src/<new>/ and rewrites every reference to the package in the project's files:

    renamed    module paths (old.x, import old, from old), paths (src/old/, old/...), the quoted name
               ("old": pyproject's project name, loggers; "old-bench"), a title at the start of a line (# old: ...),
               a whole config value (`project: old`), and the environment prefix OLD_ (OLD_DEBUG)
    kept       the word in prose ("a sound harness", "the harness's format") and identifiers that merely
               contain it (HarnessModule, harness_step): they name the idea, not the package

Files are those git tracks plus untracked ones it does not ignore; outside a git checkout, every file
but the usual generated folders. Everything is checked before anything is written. Standard library only."""

from __future__ import annotations

import importlib.util
import keyword
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: when there is no git to ask: top-level folders of generated things (data/ holds generated datasets) ...
GENERATED_TOP = {".git", ".venv", "venv", "outputs", "data", "wandb", "lightning_logs", "multirun"}
#: ... and caches wherever they are
CACHES = {"__pycache__", ".ruff_cache", ".pytest_cache"}


class RenameError(Exception):
    """A NAME that cannot be used, or a project that cannot be renamed: one line, with the fix."""


def current_name(root: Path) -> str:
    """The one package under src/ (a folder with __init__.py)."""
    found = sorted(p.parent.name for p in (root / "src").glob("*/__init__.py"))
    if len(found) != 1:
        raise RenameError(f"{root / 'src'}: expected exactly one package, found {found or 'none'}")
    return found[0]


def dependencies(root: Path) -> set[str]:
    """Import names of pyproject's dependencies, roughly (hydra-core -> hydra_core, hydra): a package
    named like one of them would shadow it."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    names = set()
    for requirement in re.findall(r'^\s*"([A-Za-z0-9_.-]+)', text, flags=re.MULTILINE):
        normal = requirement.lower().replace("-", "_").replace(".", "_")
        names |= {normal, normal.split("_")[0]}
    return names


def refuse(name: str, old: str, root: Path) -> None:
    """Raise RenameError when `name` is not a usable new package name."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise RenameError(
            f"NAME={name!r}: not a valid lowercase Python identifier (a-z, 0-9, _, not starting "
            "with a digit, not a keyword); e.g. make rename NAME=mylab"
        )
    if name == old:
        raise RenameError(f"NAME={name}: the package is already called {name}")
    if (root / name).exists() or (root / "src" / name).exists():
        where = root / name if (root / name).exists() else root / "src" / name
        raise RenameError(f"NAME={name}: {where} already exists; pick another name")
    if name in sys.stdlib_module_names or name in dependencies(root):
        raise RenameError(
            f"NAME={name}: already the name of a module this project imports (it would be "
            "shadowed); pick another name"
        )
    spec = importlib.util.find_spec(name)
    if spec is not None:
        raise RenameError(
            f"NAME={name}: a module of that name is already installed ({spec.origin}); pick another name"
        )


def project_files(root: Path) -> list[Path]:
    """Files to rewrite: what git tracks plus what it would add; without git, all but generated folders."""
    try:
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=root,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split("\0")
        )
        return sorted({root / p for p in listed if p and (root / p).is_file()})
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout (a copied tree)
        return sorted(p for p in root.rglob("*") if p.is_file() and not generated(p.relative_to(root)))


def generated(relative: Path) -> bool:
    folders = relative.parts[:-1]
    return bool(folders) and (
        folders[0] in GENERATED_TOP or any(f in CACHES or f.endswith(".egg-info") for f in folders)
    )


def rules(old: str, new: str) -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) pairs for every reference form named in this module's docstring."""
    o = re.escape(old)
    return [
        (re.compile(rf"(?<![\w.]){o}(?=\.[A-Za-z_\"'])"), new),  # old.module, old.run.run, "old."
        (re.compile(rf"\b(import|from)(\s+){o}\b"), rf"\1\2{new}"),  # import old, from old import x
        (re.compile(rf"(?<![\w.-]){o}(?=/)"), new),  # src/old/..., old/run-id
        (re.compile(rf"(?<=[\"']){o}(?=[\"'-])"), new),  # "old", "old-bench"
        (
            re.compile(rf"^(\s*(?:#+|\"\"\"|''')?\s*){o}(?=:|[ \t]*$)", re.MULTILINE),
            rf"\1{new}",
        ),  # # old: title
        (re.compile(rf"^(\s*[\w-]+:\s+){o}(?=\s*(#|$))", re.MULTILINE), rf"\1{new}"),  # key: old  # comment
        (re.compile(rf"\b{o.upper()}_(?=[A-Z])"), f"{new.upper()}_"),  # OLD_DEBUG
    ]


def rewrite(text: str, old: str, new: str) -> str:
    for pattern, replacement in rules(old, new):
        text = pattern.sub(replacement, text)
    return text


def plan(root: Path, old: str, new: str) -> dict[Path, str]:
    """path -> new text, for every text file whose text changes (binary files are left alone)."""
    changes = {}
    for path in project_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        renamed = rewrite(text, old, new)
        if renamed != text:
            changes[path] = renamed
    return changes


def rename(root: Path, new: str) -> tuple[str, int]:
    """Rename the package under `root` to `new`. Returns (old name, files rewritten)."""
    old = current_name(root)
    refuse(new, old, root)
    changes = plan(root, old, new)
    for path, text in changes.items():
        path.write_text(text, encoding="utf-8")
    shutil.move(root / "src" / old, root / "src" / new)
    for stale in (root / "src").glob(f"{old}.egg-info"):  # metadata of the old name: rebuilt by make install
        shutil.rmtree(stale)
    return old, len(changes)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("error: usage: make rename NAME=mylab (or python scripts/rename.py mylab)", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    try:
        old, count = rename(root, argv[0])
    except RenameError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"renamed {old} -> {argv[0]}: src/{argv[0]}/ and {count} files. Next: make install (the package is "
        f"installed under its new name), then make test."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
