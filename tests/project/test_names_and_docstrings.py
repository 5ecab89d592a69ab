"""The package's surface and prose: a helper only its module calls is private, and docstrings define while comments
explain (the anchors' density)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "src" / "harness"

#: where a public name may be used from: the package, its tests, benchmarks, examples, scripts, configs and docs
USERS = ("src", "tests", "benchmarks", "examples", "scripts", "conf", "docs")


def lonely_public_functions(package: Path, root: Path) -> list[str]:
    """`module:function` for each public module-level function of `package` that no other file under `root`
    names: a helper only its own module calls, which should say so with a leading underscore."""
    files = [p for folder in USERS for p in (root / folder).rglob("*") if p.suffix in (".py", ".yaml", ".md")]
    files += [p for p in root.glob("*") if p.suffix in (".py", ".md")]
    words = {path: set(re.findall(r"\w+", path.read_text(errors="replace"))) for path in files}
    lonely = []
    for path in package.rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith(
                ("_", "test_")
            ):
                continue
            if not any(node.name in names for other, names in words.items() if other != path):
                lonely.append(f"{path.relative_to(root)}:{node.name}")
    return lonely


def test_a_helper_only_its_module_calls_is_private():
    lonely = lonely_public_functions(PACKAGE, ROOT)
    assert not lonely, f"public, yet named by no other file (make them _private): {lonely}"


def test_the_privacy_rule_sees_a_lonely_helper(tmp_path):
    """Planted: a module whose helper no other file names, beside one whose function a test calls."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "pkg" / "a.py").write_text("def helper():\n    pass\n\n\ndef api():\n    helper()\n")
    (tmp_path / "tests" / "test_a.py").write_text("from pkg.a import api\n")
    assert lonely_public_functions(tmp_path / "src" / "pkg", tmp_path) == ["src/pkg/a.py:helper"]


#: docstrings define, comments explain: the anchors (torchtitan 4.1k, nanochat 6.1k, lightning-hydra-template 8.5k
#: characters of docstring per 1,000 lines; module docstrings of about 300 characters)
DOCSTRING_DENSITY, MODULE_DOCSTRING = 8_000, 320


def docstring_figures(root: Path) -> tuple[float, float]:
    """(docstring characters per 1,000 lines, the median module docstring's characters) of the modules under `root`."""
    import statistics

    chars, lines, modules = 0, 0, []
    for path in root.rglob("*.py"):
        text = path.read_text()
        tree = ast.parse(text)
        lines += len(text.splitlines())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                chars += len(ast.get_docstring(node) or "")
        if path.name != "__init__.py":  # a package's docstring maps its folder: a table, not prose
            modules.append(len(ast.get_docstring(tree) or ""))
    return chars / lines * 1000, statistics.median(modules)


def test_docstrings_define_and_comments_explain():
    density, median = docstring_figures(PACKAGE)
    assert density <= DOCSTRING_DENSITY and median <= MODULE_DOCSTRING, (
        f"{density:.0f} docstring characters per 1,000 lines (at most {DOCSTRING_DENSITY}), module docstrings "
        f"{median:.0f} characters at the median (at most {MODULE_DOCSTRING}): the reasoning goes in a comment on the "
        "line it explains"
    )


def test_the_docstring_figures_see_a_page_long_docstring(tmp_path):
    """Planted: a ten-line module whose docstring runs 2,000 characters."""
    (tmp_path / "long.py").write_text('"""' + "why " * 500 + '"""\n' + "x = 1\n" * 9)
    density, median = docstring_figures(tmp_path)
    assert median == 2000 and density > DOCSTRING_DENSITY, (density, median)
