"""`build`: a config node instantiated with a mistake turned into a one-line ConfigError naming the key (a _target_
that cannot be imported, an argument it does not take, a value it refuses); `check_target`: the same mistakes found
without building. `refused` names the key behind a library's refusal; `takes` says whether a target takes one."""

from __future__ import annotations

import functools
import inspect
import logging
import re
import traceback
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError

#: the most of a library's message a one-line error quotes
QUOTED = 240


def _unknown_argument(target, names) -> str | None:
    """The first of `names` that `target` takes no argument of; None if it takes them all, takes **kwargs, or its
    signature cannot be read."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return next((name for name in names if name not in params), None)


def _refuse_argument(node: DictConfig, key: str, target, names) -> None:
    name = _unknown_argument(target, names)
    if name is not None:
        raise ConfigError(
            f"{key}.{name}",
            node.get(name),
            f"{node._target_} takes no argument {name!r}; check the spelling or remove it",
        ) from None


def _as_command_line(value) -> str:
    """A config value as written on the command line (true, null, 3e-3)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _one_line_message(err: BaseException) -> str:
    """`err`'s first line, at most QUOTED characters, else its type's name."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return first if len(first) <= QUOTED else first[: QUOTED - 3] + "..."


def _key_at_fault(node: DictConfig, base: DictConfig, order: list[str], attempt: Callable) -> str | None:
    """The first key of `node` (those in `order` first) whose value differs from `base`'s (the config file's) and
    which, set back to it, lets `attempt(node)` succeed; None if none does."""
    names = [*(k for k in order if k in node), *(str(k) for k in node if str(k) not in order)]
    for name in names:
        if name.startswith("_") or name not in node:
            continue
        default = base.get(name) if base is not None else None
        if base is None or (name in base and node.get(name) == default):
            continue
        with_default = OmegaConf.to_container(node, resolve=True)
        if name in base:
            with_default[name] = default
        else:
            with_default.pop(name)
        try:
            attempt(OmegaConf.create(with_default))
        except Exception:  # this key alone is not why: try the next
            continue
        return name
    return None


def refused(
    err: BaseException,
    key: str,
    node: DictConfig,
    base: DictConfig | None = None,
    order: list[str] = (),
    attempt: Callable | None = None,
    what: str | None = None,
) -> ConfigError:
    """The ConfigError for a library's refusal `err` of the node at `key`: the key at fault, its value, the
    library's words and the config file's value. `attempt(node)` builds a node again."""
    what, err = what or str(node.get("_target_") or key), _library_error(err)
    # the key that, set back to the file's value, makes the refusal go away; else the one the library's words name
    name = _key_at_fault(node, base, list(order), attempt) if attempt is not None else None
    if name is None:
        words = set(re.findall(r"\w+", str(err).lower()))
        name = next((str(k) for k in node if not str(k).startswith("_") and str(k).lower() in words), None)
    if name is None:
        return ConfigError(
            key, what, f"{what} refuses this config ({_one_line_message(err)}); check the values under {key}"
        )
    fix = (
        f"the config file has {key}.{name}={_as_command_line(base.get(name))}"
        if base is not None and name in base
        else "check its value, or remove it"
    )
    return ConfigError(
        f"{key}.{name}",
        _as_command_line(node.get(name)),
        f"{what} refuses it ({_one_line_message(err)}); {fix}",
    )


def _library_error(err: BaseException) -> BaseException:
    """The library's own error behind a ConfigError that `refused` made, else `err`."""
    return getattr(err, "library", None) or err


class ImportFailed(ConfigError):
    """A _target_ whose module exists but fails as it is imported: the line leads with the cause, `file:line:
    SyntaxError: ...`, then names the key."""

    def __init__(self, key: str, value: object, cause: str):
        super().__init__(key, value, f"cannot be imported: {cause}")
        self.args = (f"{cause} ({key}={value} cannot be imported until it is fixed)",)


def _not_imported(key: str, target, err: BaseException) -> ConfigError:
    """The error of a `_target_` that did not import: its module's own failure first (a syntax error, an import it
    makes that fails) where there is one, else the module path to check."""
    failure = err.__cause__ if isinstance(err, ImportError) and err.__cause__ is not None else None
    # the target's own path not found (its package, a module or a name in it misspelled), not an import it makes
    missing = isinstance(failure, ModuleNotFoundError) and (
        failure.name is None or f"{target}.".startswith(f"{failure.name}.")
    )
    if failure is None or missing:
        detail = _one_line_message(failure or err)
        return ConfigError(
            key,
            target,
            f"cannot be imported: check the module path and that its package is importable from here "
            f"({detail})",
        )
    return ImportFailed(key, target, _where_it_failed(failure))


def _importers(filename: str) -> bool:
    """Whether a frame's file is one that imports modules (importlib, frozen or not; Hydra's), no module's own."""
    return "importlib" in filename or filename.startswith(str(Path(hydra.__file__).parent))


def _where_it_failed(failure: BaseException) -> str:
    """`file:line: Type: message` of an exception raised while a module imported: a SyntaxError's own file and line,
    else the innermost frame of the traceback outside importlib's."""
    if isinstance(failure, SyntaxError) and failure.filename:
        place = f"{_shown(failure.filename)}:{failure.lineno}"
        return f"{place}: {type(failure).__name__}: {failure.msg}"
    frames = [f for f in traceback.extract_tb(failure.__traceback__) if not _importers(f.filename)]
    place = f"{_shown(frames[-1].filename)}:{frames[-1].lineno}: " if frames else ""
    return f"{place}{type(failure).__name__}: {_one_line_message(failure)}"


def _shown(path: str) -> str:
    """`path` relative to the working directory where it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def build(node: DictConfig, key: str, **kwargs):
    """hydra.utils.instantiate of the node at `key`, a mistake raised as a one-line ConfigError. A `_partial_`
    node's arguments are checked against its target's signature now, not when it is called."""
    try:
        made = instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, ImportError) or str(err).startswith("Error locating target"):
            raise _not_imported(f"{key}._target_", node.get("_target_"), cause or err) from None
        if isinstance(cause, TypeError):
            names = [k for k in node if not str(k).startswith("_")] + list(kwargs)
            _refuse_argument(node, key, get_object(node._target_), names)
        if isinstance(cause, (ValueError, TypeError, IndexError, AssertionError)):
            error = refused(cause, key, node)
            error.library = cause  # a caller that can try other values names the key from the library's words
            raise error from None
        raise
    if isinstance(made, functools.partial):
        _refuse_argument(node, key, made.func, list(made.keywords))
    return made


def check_target(node: DictConfig, key: str, passed: tuple[str, ...] = ()) -> None:
    """That the node at `key` could be built, without building it: its `_target_` imports and takes each argument
    the node gives (and `passed`, what its caller adds), read from its signature. A ConfigError names the key."""
    hydra_log = logging.getLogger("hydra.utils")  # get_object logs the error it raises: the one line says it
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)
    try:
        target = get_object(node._target_)
    except Exception as err:  # a module path misspelled, or a module that fails as it imports
        raise _not_imported(f"{key}._target_", node.get("_target_"), err) from None
    finally:
        hydra_log.setLevel(level)
    _refuse_argument(node, key, target, [*(str(k) for k in node if not str(k).startswith("_")), *passed])


def takes(node: DictConfig, name: str) -> bool:
    """Whether the node's _target_ takes an argument `name` (False where it cannot be imported)."""
    try:
        target = get_object(node._target_)
    except Exception:  # reported, with the key, by build()
        return False
    return _unknown_argument(target, [name]) is None
