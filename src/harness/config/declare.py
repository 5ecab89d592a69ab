"""A config key declared once: `key(default, doc, low=..., high=..., whole=..., choices=...)` is a dataclass field
holding its type (the annotation), default, range and one-line doc; `check_declared` holds a composed config to every
declaration it carries, `declared_fields` reads one. No torch."""

# A group's option is a dataclass in harness.config.groups, registered in Hydra's ConfigStore as
# <group>/<option>_schema; its yaml file lists that schema first in its defaults and keeps only what differs and the
# comments. Hydra refuses a misspelled key or a value of the wrong type while composing; the ranges and the rules
# across a node's keys (a class's `rules(node, cfg)`) are checked here, at the door, from the same declaration.

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING, dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError


@dataclass(frozen=True)
class Declared:
    """One key's declaration, as `declared_fields` reads it: its name, default, range and doc."""

    name: str
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    below: bool = False  # `high` itself is out of range (a probability below 1)
    whole: bool = False
    choices: tuple = ()


def key(
    default: Any = MISSING,
    doc: str = "",
    *,
    low: float | None = None,
    high: float | None = None,
    below: bool = False,
    whole: bool = False,
    choices: tuple = (),
):
    """A dataclass field: `default` (a list or dict is copied for each config), and what `check_declared` holds a
    value to: at least `low`, at most `high` (below it, with `below`), a whole number, one of `choices`."""
    metadata = {
        "doc": doc,
        "low": low,
        "high": high,
        "below": below,
        "whole": whole,
        "choices": tuple(choices),
    }
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared_fields(schema) -> list[Declared]:
    """The keys a declaration class holds, in order (a field made without `key` has no range and no doc)."""
    found = []
    for field in dataclasses.fields(schema):
        default = field.default if field.default is not MISSING else None
        if field.default_factory is not MISSING:
            default = field.default_factory()
        found.append(Declared(field.name, default, **{"doc": "", **field.metadata}))
    return found


def _hint(full: str, item: Declared) -> str:
    """What a refusal of `full` adds: the key's doc and a value to try (its default)."""
    tried = item.default
    tried = "null" if tried is None else str(tried).lower() if isinstance(tried, bool) else _plain(tried)
    example = "" if isinstance(tried, str) and tried.startswith("${") else f" (try {full}={tried})"
    return f"{item.doc}{example}" if item.doc else example.strip(" ()")


def _plain(number):
    """A float that is whole as the command line writes it (-1, not -1.0): a typed key holds 1.0 for 1."""
    return int(number) if isinstance(number, float) and number.is_integer() else number


def _check_value(full: str, value, item: Declared) -> None:
    """Refuse `value` of the key `full` outside `item`'s range or choices."""
    if value is None or (isinstance(value, str) and value.startswith("${")):
        return
    value = _plain(value)
    if item.choices and value not in item.choices:
        words = ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in item.choices)
        raise ConfigError(full, value, f"choose one of {words}; {item.doc}")
    if item.low is None and item.high is None and not item.whole:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (item.whole and not float(value).is_integer()):
        raise ConfigError(
            full, value, f"must be {'a whole number' if item.whole else 'a number'}; {_hint(full, item)}"
        )
    if math.isnan(value):
        raise ConfigError(full, value, f"must be a number, not nan; {_hint(full, item)}")
    if item.low is not None and value < item.low:
        raise ConfigError(full, value, f"must be >= {_plain(item.low)}; {_hint(full, item)}")
    if item.high is not None and (value >= item.high if item.below else value > item.high):
        raise ConfigError(
            full, value, f"must be {'<' if item.below else '<='} {_plain(item.high)}; {_hint(full, item)}"
        )


def _declared_nodes(node, path: str = ""):
    """Every node under `node` (itself included) that a declaration class types, with its dotted key."""
    if not isinstance(node, DictConfig) or node._is_none() or node._is_interpolation():
        return
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        yield path, node, schema
    for name in node:
        child = node._get_node(name)
        if isinstance(child, DictConfig) and name != "hydra":
            yield from _declared_nodes(child, f"{path}.{name}" if path else str(name))


def check_declared(cfg: DictConfig) -> None:
    """Raise ConfigError on the first value of `cfg` outside its declared range, or against a declaration's rules
    across its keys (the class's `rules(node, cfg)`)."""
    for path, node, schema in _declared_nodes(cfg):
        for item in declared_fields(schema):
            if item.name in node:
                raw = node._get_node(item.name)
                value = raw if isinstance(raw, DictConfig) else node._get_node(item.name)._value()
                if not isinstance(value, DictConfig):
                    _check_value(
                        f"{path}.{item.name}" if path else item.name, _resolved(node, item.name, value), item
                    )
        rules = getattr(schema, "rules", None)
        if rules is not None:
            rules(node, cfg)


def _resolved(node: DictConfig, name: str, raw):
    """The value at `name`, resolved where it can be (a `${hydra:...}` resolves only in a running job)."""
    if not (isinstance(raw, str) and raw.startswith("${")):
        return raw
    try:
        return node[name]
    except Exception:  # left to the job, where it resolves
        return raw
