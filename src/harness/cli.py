"""The command line: Hydra for composition and sweeps, one-line errors and exit codes around it.

Exit codes: 0 PASS (or a full run done), 1 FAIL, 2 bad config or input, 3 preflight failed, 128 + the signal
when interrupted (130 SIGINT, 143 SIGTERM).
HARNESS_DEBUG=1 shows the full traceback of a config error instead of the one line."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def _die(message: str, err: BaseException | None = None) -> None:
    if err is not None and os.environ.get("HARNESS_DEBUG"):
        raise err
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


#: what a schema field's type asks for, in the words of a one-line error
KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


def _explain(err: Exception, overrides: list[str], base) -> str:
    """One line out of a Hydra composition error: the override at fault and the fix.

    `base` is the config composed without overrides, to list the keys that do exist."""
    import typing

    from hydra.errors import MissingConfigException
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    def override_of(key: str) -> str:
        return next((o for o in overrides if o.split("=")[0].lstrip("+~") == key), key)

    cause = err.__cause__
    if isinstance(err, MissingConfigException) and err.options is not None:
        group = err.missing_cfg_file.rpartition("/")[0] if err.missing_cfg_file else "?"
        return f"{override_of(group)}: no such option; choose one of {', '.join(sorted(err.options))}"
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
        kind = KINDS.get(wanted, getattr(wanted, "__name__", str(wanted)))
        return f"{override_of(cause.full_key)}: {cause.full_key} must be {kind}, not {cause.value!r}"
    first = next((line for line in str(err).splitlines() if line.strip()), str(err))
    return f"{' '.join(overrides)}: {first} (HARNESS_DEBUG=1 shows the traceback)"


def base_of(overrides: list[str], searchpath: list[str]):
    """The config a mistake is explained against: with the overrides' group choices (logger=wandb: the keys
    under logger are wandb's), or without any where those do not compose. Inside initialize_config_dir."""
    from hydra import compose

    choices = [o for o in overrides if o[:1] not in "+~" and "." not in o.split("=")[0]]
    try:
        return compose(config_name="train", overrides=searchpath + choices)
    except Exception:
        return compose(config_name="train", overrides=searchpath)


def check_overrides(argv: list[str], config_dir: Path) -> None:
    """Compose the config for every value a sweep names and validate it, before anything runs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from harness.compat import hydra_args_parser
    from harness.config import validate
    from harness.distributed import check_launch, on_cluster
    from harness.door import check_types
    from harness.errors import ConfigError
    from harness.search import check_sweeper

    args = hydra_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.info or args.shell_completion or args.cfg:
        return
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except Exception as err:  # Hydra's own grammar error already names the override
        _die(grammar_error(err, args.overrides), err)
    variants, hydra_overrides = [[]], []
    for override in parsed:
        key = override.get_key_element()
        if key.lstrip("+~").startswith("hydra"):  # launcher, sweeper and output settings: checked below
            hydra_overrides.append(override.input_line)
            continue
        if override.is_interval_sweep():  # Optuna's interval(low,high): its two ends stand for it
            values = [str(override.value().start), str(override.value().end)]
        elif override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        # each value with the first of every other: enough to catch any single bad value
        variants = [v + [f"{key}={values[0]}"] for v in variants] + [
            variants[0] + [f"{key}={value}"] for value in values[1:]
        ]
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="train"):
        # where configs are looked for counts when composing a job too (a fork's conf folder outside conf/)
        searchpath = [o for o in hydra_overrides if o.lstrip("+~").startswith("hydra.searchpath")]

        try:  # the first job's Hydra settings: a preset may choose the launcher and make the run a sweep
            hydra_cfg = compose(
                config_name="train", overrides=variants[0] + hydra_overrides, return_hydra_config=True
            ).hydra
        except Exception as err:
            _die(_explain(err, variants[0] + hydra_overrides, base_of(variants[0], searchpath)), err)
        launcher, multirun = hydra_cfg.launcher, args.multirun or hydra_cfg.mode == RunMode.MULTIRUN
        for variant in variants:
            try:
                cfg = compose(config_name="train", overrides=searchpath + variant)
            except Exception as err:
                _die(_explain(err, variant, base_of(variant, searchpath)), err)
            try:  # the devices are held against this machine unless a cluster runs the job elsewhere
                check_types(
                    cfg, base_of(variant, searchpath), [o.split("=")[0].lstrip("+~") for o in variant]
                )
                validate(cfg, devices=not on_cluster(launcher))
                check_launch(cfg, launcher, multirun=multirun)  # DDP ranks that would never meet
                check_sweeper(cfg, hydra_cfg.sweeper, multirun=multirun)  # Optuna needs a number to optimize
            except ConfigError as err:
                _die(str(err), err)
        check_folders(cfg, hydra_cfg, multirun)


def check_folders(cfg, hydra_cfg, multirun: bool) -> None:
    """The folders a run writes: its run (or sweep) dir can be made and holds no earlier run, and data.root, where
    datasets are generated, can be made (an existing one may be a read-only cache, checked when written)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    directory = str(hydra_cfg.sweep.dir if multirun else hydra_cfg.run.dir)
    check_writable(key, directory)
    check_earlier_runs(cfg, Path(directory), multirun)
    root = (cfg.get("data") or {}).get("root")
    if root is not None and not Path(str(root)).is_dir():
        check_writable("data.root", str(root), example="data")


def grammar_error(err: Exception, overrides: list[str]) -> str:
    """Hydra's grammar error in one line; for a value with characters outside ASCII, which Hydra's grammar takes
    only quoted, how to quote it through the shell."""
    first = str(err).splitlines()[0]
    odd = next((o for o in overrides if not o.isascii()), None)
    if odd is None or "=" not in odd:
        return f"{first} (HARNESS_DEBUG=1 shows the traceback)"
    key, _, value = odd.partition("=")
    return (
        f"{odd}: Hydra reads a value with characters outside ASCII only when it is quoted; "
        f"quote it inside the shell's quotes: \"{key}='{value}'\""
    )


def check_earlier_runs(cfg, directory: Path, multirun: bool) -> None:
    """No earlier run is overwritten: the run dir, or each job dir of a sweep dir, must hold no verdict unless
    harness.door allows it. A rank Lightning starts works in rank 0's dir: not checked."""
    from harness.distributed import started_by_lightning
    from harness.door import check_run_dir, check_sweep_dir
    from harness.errors import ConfigError

    if started_by_lightning():
        return
    try:
        (check_sweep_dir if multirun else check_run_dir)(cfg, directory)
    except ConfigError as err:
        _die(str(err), err)


def check_writable(key: str, directory: str, example: str = "outputs/...") -> None:
    """Stop now if the run directory cannot be made: no run should die for it after the work is done."""
    import tempfile

    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as err:
        _die(
            f"{key}={directory}: cannot write there ({err.strerror or err}); pick a writable folder, "
            f"e.g. {key}={example}",
            err,
        )


def task(cfg) -> dict | float | None:
    """One Hydra job. A single run exits with its verdict's code; a sweep job records and goes on, returning its
    verdict, or with `optimized_metric` set the number it names (what an optimizing sweeper reads). In a sweep
    stopped by a signal (harness.signals.MARKER), a job not started yet does not start."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.distributed import global_rank, started_by_lightning
    from harness.door import RunDirTaken, check_run_dir
    from harness.errors import ConfigError
    from harness.run import exit_code, run
    from harness.signals import Interrupted, guard_worker, handled_here, mark_stopped, stopped
    from harness.verdict import Verdict

    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    out, sweep_dir = Path(HydraConfig.get().runtime.output_dir), Path(HydraConfig.get().sweep.dir)
    if sweeping:
        guard_worker()
        if stopped(sweep_dir) is not None:
            return not_started(out, stopped(sweep_dir))
    try:
        if not started_by_lightning():  # a launcher's job too: its dir holds no earlier run
            check_run_dir(cfg, out)
        verdict = run(cfg)
    except ConfigError as err:
        if not sweeping:
            _die(str(err), err)
        log.error("error: %s", err)
        if not isinstance(err, RunDirTaken):  # that dir's verdict is an earlier run's: left as it is
            Verdict(status="ERROR", error=str(err)).write(out)
        return None
    except Interrupted as stop:  # before the job's own handler took over: a verdict all the same
        verdict = Verdict(status="INTERRUPTED", signal=stop.signum, steps=0, run_dir=str(out))
        verdict.write(out)
        verdict = verdict.as_dict()
    except Exception as err:
        # a bug, not a config mistake: record it where the results would have been, then show it whole
        Verdict(status="ERROR", error=repr(err)).write(out)
        if not sweeping:
            raise
        log.exception("job failed: %s", err)  # the others go on; the summary marks this one
        return None
    if not sweeping:
        # a DDP rank > 0 reports through rank 0: its own non-zero exit would make Lightning kill rank 0
        sys.exit(exit_code(verdict) if global_rank() == 0 else 0)
    if verdict["status"] == "INTERRUPTED" and handled_here():  # one job stopped by a signal stops the sweep
        mark_stopped(sweep_dir, verdict["signal"])
    if cfg.get("optimized_metric"):  # what a search (hydra/sweeper=optuna) optimizes; None: a failed trial
        from harness.search import metric_value

        return metric_value(verdict, cfg.optimized_metric, Path(HydraConfig.get().runtime.output_dir))
    return verdict


def not_started(out: Path, signum: int) -> None:
    """The verdict of a sweep job that a signal stopped before it began: INTERRUPTED at step 0, saying so."""
    import signal

    from harness.verdict import Verdict

    name = signal.Signals(signum).name
    log.warning("not started: the sweep was stopped by %s", name)
    Verdict(
        status="INTERRUPTED", signal=signum, steps=0, error=f"not started: the sweep was stopped by {name}"
    ).write(out)


#: third-party warnings that say nothing about the user's run
QUIET = (
    r"Experiment logs directory .* exists and is not empty",  # the run dir already holds .hydra/
    r".*isinstance\(treespec, LeafSpec\)",
    r"The '\w+_dataloader' does not have many workers",  # tiny in-memory datasets need none
    r"`weights_only` was not set",
)


#: the loggers Lightning gives a handler of their own when imported before logging is set up
LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning_fabric")


def route_lightning_logs() -> None:
    """Send Lightning's log records to the root logger, as every other library's. Imported before Hydra sets up
    logging, Lightning finds no root handler, so it gives its loggers a console handler of their own and stops
    them propagating; Hydra's job_logging then removes that handler (it names these loggers, to set their
    levels) and leaves propagation off: every Lightning line, at any level, went nowhere. Propagating, they
    reach the console and train.log, filtered by the levels conf/train.yaml gives them."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True


def main(config_dir: Path) -> None:
    """Entry point of train.py: validate the overrides, then hand over to Hydra. A signal at any moment exits
    128 + its number: the first handler is installed before anything else, and raises at once until a job's
    own handler (harness.faults.StopOnSignal) or a sweep's (harness.signals.SweepStop) takes over."""
    import atexit
    import signal

    from harness.signals import Interrupted, SignalGate, ignore_from_now, leave_at_once

    gate = SignalGate()
    gate.install()
    atexit.register(ignore_from_now)  # the first registered, the last run
    try:
        start(config_dir)
    except Interrupted as stop:
        print(f"interrupted by {signal.Signals(stop.signum).name}", file=sys.stderr)
        sys.exit(128 + stop.signum)
    except Exception:
        # raised inside a C extension's import (numpy's, torch's), Interrupted comes back as an ImportError
        if gate.received is None:
            raise
        print(f"interrupted by {signal.Signals(gate.received).name}", file=sys.stderr)
        sys.exit(128 + gate.received)
    finally:
        leave_at_once()


def start(config_dir: Path) -> None:
    """Validate the overrides, then hand over to Hydra."""
    import warnings

    import hydra

    check_overrides(sys.argv[1:], config_dir)  # first: a typo costs a second, not the imports below
    import pytorch_lightning  # noqa: F401  (imported before Hydra sets up logging, so conf/ sets its levels)

    route_lightning_logs()
    for pattern in QUIET:
        warnings.filterwarnings("ignore", message=pattern)
    hydra.main(config_path=str(config_dir), config_name="train", version_base="1.3")(task)()
