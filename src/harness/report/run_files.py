"""A run dir's files read back for the summary and the pages, whatever is damaged or missing said, never raised:
`yaml_in` (.hydra/ files), `select`, `read_metrics` (metrics.csv as points), `flat` and `defaults_for` (the
config as dotted keys, and its defaults). verdict.json's reader is harness.report.verdict."""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


def yaml_in(path: Path, listed: bool = False):
    """(the YAML at `path`: a mapping, or with `listed` a list; "") or (None, why); (None, "") where there is none."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not path.is_file():
        return None, ""
    try:
        loaded = OmegaConf.load(path)
    except Exception as err:  # damaged YAML, not UTF-8, unreadable: the reader says so and goes on
        return None, f"{path}: not readable YAML ({type(err).__name__})"
    shape, other = (ListConfig, "mapping") if listed else (DictConfig, "list")
    if not isinstance(loaded, shape):
        return None, f"{path}: holds a YAML {other}, not a {'list' if listed else 'config'}"
    return loaded, ""


def select(cfg, key: str):
    """The value at `key`, or None when absent or unresolvable here."""
    from omegaconf import OmegaConf

    if cfg is None:
        return None
    try:
        return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
    except Exception:  # a custom resolver (${now:...}) that is not registered in this process
        return None


@dataclass
class Metrics:
    """metrics.csv read back: each column's (step, value) points, and why not where the file cannot be read."""

    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    problem: str = ""


def last_step(path: Path, at: int) -> int:
    """The step (column `at`) of the last row of `path` that parses, read from its tail."""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 65536))
        tail = f.read().decode("utf-8", errors="replace").splitlines()[1:]
    for row in reversed(list(csv.reader(tail))):
        try:
            return int(float(row[at]))
        except (ValueError, IndexError, OverflowError):
            continue
    return 0


def read_metrics(path: Path, wanted, sampled=lambda name: False, most: int = 2000) -> Metrics:
    """The columns of metrics.csv at `path` for which `wanted(name)`, those for which `sampled(name)` at most
    `most` steps evenly spaced. A row that does not parse is skipped; an unreadable file keeps what was read."""
    # sampled: the many per-layer columns of a long run, so a page's cost and memory stay bounded
    metrics = Metrics()
    if not path.is_file():
        metrics.problem = (
            f"{path.name}: not written (the run stopped before its first logged step, or logs none)"
        )
        return metrics
    curves: dict[str, list] = {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = csv.reader(f)
            header = next(rows, None)
            if not header or "step" not in header:
                metrics.problem = f"{path.name}: no header with a step column; not a metrics file"
                return metrics
            at = header.index("step")
            every = max(1, -(-last_step(path, at) // most))
            columns = [(i, name) for i, name in enumerate(header) if wanted(name)]
            always = [(i, name) for i, name in columns if not sampled(name)]
            curves = {name: [] for _, name in columns}
            for row in rows:
                try:
                    step = int(float(row[at]))
                except (ValueError, IndexError, OverflowError):
                    continue
                for i, name in columns if step % every == 0 else always:
                    if i < len(row) and row[i]:
                        try:
                            curves[name].append((step, float(row[i])))
                        except ValueError:
                            continue
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        metrics.problem = f"{path.name}: cannot be read ({type(err).__name__}: {err})"
    metrics.curves = {name: points for name, points in curves.items() if points}
    return metrics


def flat(cfg) -> dict[str, str]:
    """Every leaf of a config as dotted key -> its value's text (interpolations as written)."""
    from omegaconf import OmegaConf

    out = {}

    def walk(value, name: str) -> None:
        if isinstance(value, (dict, list)) and value:
            for key, inner in value.items() if isinstance(value, dict) else enumerate(value):
                walk(inner, f"{name}.{key}" if name else str(key))
        else:
            out[name] = str(value)

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out


def defaults_for(hydra) -> dict[str, str] | None:
    """The config the run's conf/ (found from its hydra.yaml) composes with no override, flattened; None where it
    cannot be composed."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    name = str(select(hydra, "hydra.job.config_name") or "train")
    try:
        if GlobalHydra.instance().is_initialized():
            return flat(compose(config_name=name))
        sources = select(hydra, "hydra.runtime.config_sources") or []
        main = next(s for s in sources if s.get("provider") == "main" and s.get("schema") == "file")
        with initialize_config_dir(config_dir=str(main["path"]), version_base="1.3"):
            return flat(compose(config_name=name))
    except Exception as err:  # a conf/ that moved or changed since the run: the page shows the whole config
        log.debug("defaults not composed: %s", err)
        return None
