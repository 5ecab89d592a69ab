"""A Hydra composition or grammar error in one line, the override at fault and the fix (`explain`,
`grammar_error`), and KIND_WORDS, the one table of what a kind of value is called, with `value_kind`."""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig

from harness.config.extras import missing_plugin_line

#: what a kind of value is called in a one-line error
KIND_WORDS = {
    "int": "a whole number",
    "number": "a number",
    "bool": "true or false",
    "str": "text",
    "list": "a list",
    "dict": "a mapping",
}
#: a schema field's type -> its kind
TYPE_KINDS = {int: "int", float: "number", bool: "bool", str: "str"}


def value_kind(value) -> str | None:
    """A config value's kind: number, bool, str, list, dict (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, ListConfig)):
        return "list"
    if isinstance(value, (dict, DictConfig)):
        return "dict"
    return "str"


def explain(err: Exception, overrides: list[str], base) -> str:
    """A Hydra composition error in one line: the override at fault and the fix. `base`: the config composed
    without the overrides, whose keys are listed."""
    import types
    import typing

    from hydra.errors import MissingConfigException
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    def override_of(key: str) -> str:
        return next((o for o in overrides if o.split("=")[0].lstrip("+~") == key), key)

    cause = err.__cause__
    if isinstance(err, MissingConfigException) and missing_plugin_line(err.missing_cfg_file):
        return missing_plugin_line(err.missing_cfg_file)
    if isinstance(err, MissingConfigException) and err.options is not None:
        group = err.missing_cfg_file.rpartition("/")[0] if err.missing_cfg_file else "?"
        options = sorted(o for o in err.options if not o.endswith("_schema"))  # a regime's types: no option
        return f"{override_of(group)}: no such option; choose one of {', '.join(options)}"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        key = cause.full_key
        parent = key.rpartition(".")[0]
        node = OmegaConf.select(base, parent) if parent else base
        known = (
            f"; keys under {parent or 'the top level'}: {', '.join(node)}"
            if isinstance(node, DictConfig)
            else ""
        )
        if parent == "logger":  # the old flat form (logger.mode): each tracker's settings sit under its name
            known += f"; a tracker's settings go under its name: logger=wandb logger.wandb.{key.split('.')[-1]}=..."
        return f"{override_of(key)}: no such key, check its spelling{known} (a new key takes a +: +{key}=...)"
    if isinstance(cause, ValidationError) and cause.full_key and cause.object_type is not None:
        wanted = typing.get_type_hints(cause.object_type).get(cause.key)
        if typing.get_origin(wanted) in (
            typing.Union,
            types.UnionType,
        ):  # int | None: a whole number (or null)
            plain = [a for a in typing.get_args(wanted) if a is not type(None)]
            wanted = plain[0] if len(plain) == 1 else wanted
        words = KIND_WORDS.get(TYPE_KINDS.get(wanted), getattr(wanted, "__name__", str(wanted)))
        return f"{override_of(cause.full_key)}: {cause.full_key} must be {words}, not {cause.value!r}"
    first = next((line for line in str(err).splitlines() if line.strip()), str(err))
    return f"{' '.join(overrides)}: {first} (HARNESS_DEBUG=1 shows the traceback)"


def choices_of(overrides: list[str]) -> list[str]:
    """The overrides that choose a group's option or set a top-level key (logger=wandb, n=2)."""
    return [o for o in overrides if o[:1] not in "+~" and "." not in o.split("=")[0]]


def base_of(overrides: list[str], searchpath: list[str]):
    """The config a mistake is explained against: composed with the overrides' group choices, else with none.
    Inside initialize_config_dir."""
    from hydra import compose

    try:
        return compose(config_name="train", overrides=searchpath + choices_of(overrides))
    except Exception:
        return compose(config_name="train", overrides=searchpath)


def grammar_error(err: Exception, overrides: list[str]) -> str:
    """Hydra's grammar error in one line; for a value outside ASCII, which Hydra takes only quoted, how to quote it."""
    first = str(err).splitlines()[0]
    odd = next((o for o in overrides if not o.isascii()), None)
    if odd is None or "=" not in odd:
        return f"{first} (HARNESS_DEBUG=1 shows the traceback)"
    key, _, value = odd.partition("=")
    return (
        f"{odd}: Hydra reads a value with characters outside ASCII only when it is quoted; "
        f"quote it inside the shell's quotes: \"{key}='{value}'\""
    )
