"""Each config key is declared once: its type, default, range and doc in one class (harness.config.groups, and
harness.config.schema for harness's own keys); no range table elsewhere, no yaml repeating a declared default."""

from __future__ import annotations

import ast
import dataclasses

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from harness.config.declare import declared_fields
from harness.config.schema import register
from tests.conftest import CONF, ROOT

#: the folders of conf/ that are not groups of options with keys: presets of other groups' values, Hydra's own
NOT_DECLARED = ("experiment", "hydra")


def _schema_named(yaml: dict) -> str | None:
    """The `<option>_schema` entry a yaml's defaults list names first, if any (`<option>_schema@<package>` in a
    @package _global_ preset that places it)."""
    for entry in yaml.get("defaults") or []:
        if isinstance(entry, str) and entry.partition("@")[0].endswith("_schema"):
            return entry
    return None


def _declaration(group: str, name: str):
    """The class stored in Hydra's ConfigStore as group/name."""
    register()
    node = ConfigStore.instance().load(f"{group}/{name.partition('@')[0]}.yaml").node
    return OmegaConf.get_type(node)


def test_no_range_table_outside_the_declarations():
    tables = []
    for path in (ROOT / "src" / "harness").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            tables += [f"{path.relative_to(ROOT)}: {n}" for n in names if "RANGES" in n]
    assert tables == [], tables


def test_every_option_names_its_declaration_and_repeats_none_of_its_defaults():
    unnamed, repeated = [], []
    for path in sorted(CONF.glob("*/*.yaml")):
        group = path.parent.name
        if group in NOT_DECLARED:
            continue
        yaml = OmegaConf.to_container(OmegaConf.load(path))
        schema = _schema_named(yaml)
        if schema is None:
            unnamed.append(str(path.relative_to(ROOT)))
            continue
        defaults = {item.name: item.default for item in declared_fields(_declaration(group, schema))}
        package = schema.partition("@")[2]
        values = (yaml.get(package) or {}) if package else yaml
        repeated += [
            f"{path.relative_to(ROOT)}: {k}" for k, v in values.items() if k in defaults and defaults[k] == v
        ]
    assert unnamed == [], f"options with no declaration: {unnamed}"
    assert repeated == [], f"values the declaration already has: {repeated}"


def test_every_declared_key_has_a_doc():
    register()
    undocumented = []
    for path in sorted(CONF.glob("*/*.yaml")):
        schema = _schema_named(OmegaConf.to_container(OmegaConf.load(path)))
        if schema is None or path.parent.name in NOT_DECLARED:
            continue
        cls = _declaration(path.parent.name, schema)
        undocumented += [
            f"{cls.__name__}.{f.name}"
            for f in dataclasses.fields(cls)
            if not f.name.startswith("_") and not f.metadata.get("doc")
        ]
    assert undocumented == [], undocumented
