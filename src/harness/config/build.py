"""`build`: a config node instantiated (hydra.utils.instantiate) with a user's mistake turned into one line naming
the key: a _target_ that cannot be imported, an argument it does not take, a value it refuses."""

from __future__ import annotations

import functools
import inspect

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig

from harness.errors import ConfigError


def unknown_argument(target, names) -> str | None:
    """The first of `names` that `target` (a class or function) takes no argument of; None if it takes them
    all, or any keyword (**kwargs), or its signature cannot be read."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return next((name for name in names if name not in params), None)


def refuse_argument(node: DictConfig, key: str, target, names) -> None:
    name = unknown_argument(target, names)
    if name is not None:
        raise ConfigError(
            f"{key}.{name}",
            node.get(name),
            f"{node._target_} takes no argument {name!r}; check the spelling or remove it",
        ) from None


def build(node: DictConfig, key: str, **kwargs):
    """hydra.utils.instantiate of the config node at `key`, with a user's mistake turned into a one-line
    ConfigError: a _target_ that cannot be imported, an argument it does not take, a value it refuses.
    A `_partial_` node's arguments are held against its target's signature now, not when it is called."""
    try:
        made = instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, ImportError) or str(err).startswith("Error locating target"):
            raise ConfigError(
                f"{key}._target_",
                node.get("_target_"),
                "cannot be imported: check the module "
                f"path and that its package is importable from here ({cause or err})",
            ) from None
        if isinstance(cause, TypeError):
            names = [k for k in node if not str(k).startswith("_")] + list(kwargs)
            refuse_argument(node, key, get_object(node._target_), names)
        if isinstance(cause, ValueError):
            raise ConfigError(key, node.get("_target_"), str(cause)) from None
        raise
    if isinstance(made, functools.partial):
        refuse_argument(node, key, made.func, list(made.keywords))
    return made


def takes(node: DictConfig, name: str) -> bool:
    """Whether the class or function the node's _target_ names takes an argument `name` (False where it cannot be
    imported: building it then says why)."""
    try:
        target = get_object(node._target_)
    except Exception:  # reported, with the key, by build()
        return False
    return unknown_argument(target, [name]) is None
