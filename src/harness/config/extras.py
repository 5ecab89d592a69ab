"""Which extra of pyproject.toml each option needs (EXTRAS, TRACKERS, PLUGINS), and a one-line ConfigError at the
door where it is missing (`check_extras`, `check_plugins`, `missing_plugin_line`)."""

# refused at the door, not as an ImportError after the data is built and the preflight has run

from __future__ import annotations

import importlib.util

from harness.errors import ConfigError

#: extra -> the modules of it the harness imports (each must be there)
EXTRAS = {
    "hf": ("transformers",),
    "datasets": ("datasets", "pyarrow"),
    "wandb": ("wandb",),
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
    "search": ("optuna", "hydra_plugins.hydra_optuna_sweeper"),
    "slurm": ("submitit", "hydra_plugins.hydra_submitit_launcher"),
    "parallel": ("joblib", "hydra_plugins.hydra_joblib_launcher"),
}
#: a tracker (an entry of `logger`) -> the extra it needs
TRACKERS = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow"}
#: a Hydra plugin's config (what `hydra/launcher=...` or `hydra/sweeper=...` composes) -> the extra it comes with
PLUGINS = {"submitit": "slurm", "joblib": "parallel", "optuna": "search"}


def _missing_module(extra: str) -> str | None:
    """The first module of `extra` that cannot be imported here, or None."""
    for module in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):  # a parent package missing, or a module blocked
            return module
    return None


def _missing_extra_error(key: str, value, extra: str) -> ConfigError | None:
    """The ConfigError for an option whose extra is not installed, or None where it is."""
    module = _missing_module(extra)
    if module is None:
        return None
    return ConfigError(
        key,
        value,
        f"needs the {extra} extra ({module} is not installed): pip install -e '.[{extra}]' (make install installs "
        "every extra)",
    )


def check_extras(cfg) -> None:
    """The model, data and trackers the config chooses have their extras installed."""
    target = str((cfg.get("model") or {}).get("_target_", ""))
    found = [("model", target, "hf")] if target.endswith("HFCausalLM") else []
    data = str((cfg.get("data") or {}).get("_target_", ""))
    found += [("data", "hf", "datasets")] if data.endswith("HFDataModule") else []
    found += [
        (f"logger.{name}", "on", TRACKERS[name]) for name in (cfg.get("logger") or {}) if name in TRACKERS
    ]
    for key, value, extra in found:
        error = _missing_extra_error(key, value, extra)
        if error is not None:
            raise error


def check_plugins(hydra_cfg) -> None:
    """The launcher and sweeper Hydra composed have their extras installed."""
    for group in ("launcher", "sweeper"):
        target = str((hydra_cfg.get(group) or {}).get("_target_", ""))
        for name, extra in PLUGINS.items():
            error = (
                _missing_extra_error(f"hydra/{group}", target.rsplit(".", 1)[-1], extra)
                if name in target.lower()
                else None
            )
            if error is not None:
                raise error


def missing_plugin_line(missing_file: str | None) -> str | None:
    """For a config file Hydra could not find that a plugin ships (hydra/sweeper/optuna), the line naming the extra
    to install; None for any other."""
    if not missing_file or not missing_file.startswith("hydra/"):
        return None
    name = missing_file.rsplit("/", 1)[-1]
    extra = next((e for plugin, e in PLUGINS.items() if plugin in name), None)
    if extra is None:
        return None
    error = _missing_extra_error(missing_file.rsplit("/", 1)[0], name, extra)
    return None if error is None else str(error)
