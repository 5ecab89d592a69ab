"""The door, `check_overrides`: every job's config composed and validated before anything runs, each part's target
checked against its signature (nothing built), its folders checked, no earlier run overwritten. A mistake is one `error:` line and exit 2, before the heavy imports."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from harness.errors import ConfigError, die
from harness.report.verdict import status_in


def check_overrides(argv: list[str], config_dir: Path) -> list[str]:
    """Compose and validate the config for every value a sweep names, exiting 2 on a mistake. Returns the overrides
    to add to the command line (the search class, a rank's output_subdir)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from harness.compat import hydra_args_parser
    from harness.config.explain import base_of, explain, grammar_error
    from harness.config.extras import check_plugins
    from harness.report.optimized_metric import search_class
    from harness.tasks.targets import as_a_job
    from harness.train.distributed.devices import check_torchrun_launch

    args = hydra_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.info or args.shell_completion or args.cfg:
        return []
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except Exception as err:  # Hydra's own grammar error already names the override
        die(grammar_error(err, args.overrides), err)
    variants, hydra_overrides = _variants_of(parsed)
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name="train"):
        # where configs are looked for counts when composing a job too (a fork's conf folder outside conf/)
        searchpath = [o for o in hydra_overrides if o.lstrip("+~").startswith("hydra.searchpath")]

        try:  # the first job's Hydra settings: a preset may choose the launcher and make the run a sweep
            first = compose(
                config_name="train", overrides=variants[0] + hydra_overrides, return_hydra_config=True
            )
            hydra_cfg = first.hydra
        except Exception as err:
            die(explain(err, variants[0] + hydra_overrides, base_of(variants[0], searchpath)), err)
        launcher, multirun = hydra_cfg.launcher, args.multirun or hydra_cfg.mode == RunMode.MULTIRUN
        try:
            check_plugins(hydra_cfg)  # the launcher's and sweeper's extras, before a job is queued
            check_torchrun_launch(hydra_cfg, multirun)  # processes torchrun started: one run, one dir
        except ConfigError as err:
            die(str(err), err)
        jobs = _checked_jobs(variants, searchpath, hydra_cfg, multirun, _job_config(first))
        cfg = jobs[-1]
        _check_folders(cfg, hydra_cfg, multirun)
        # last, as it imports torch and Lightning: the targets every job names, and the sweep's launcher
        launcher_base = _hydra_base(variants[0] + hydra_overrides, searchpath) if multirun else None
        with as_a_job(first):
            _check_targets(jobs, launcher, launcher_base, hydra_overrides, multirun)
    return search_class(hydra_cfg.sweeper, multirun) + _rank_args(hydra_overrides)


def _rank_args(hydra_overrides: list[str]) -> list[str]:
    """What a rank > 0 started with the others (torchrun, by hand) adds to the command line: no `.hydra/` of its
    own in the run dir rank 0 writes."""
    from harness.ranks import global_rank, started_by_lightning

    given = any(o.startswith("hydra.output_subdir") for o in hydra_overrides)
    return (
        ["hydra.output_subdir=null"] if global_rank() > 0 and not started_by_lightning() and not given else []
    )


def _job_config(composed: DictConfig) -> DictConfig:
    """A job's config from its composition with the Hydra settings: the same, less its `hydra` node."""
    import copy

    from omegaconf import open_dict

    cfg = copy.deepcopy(composed)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def _checked_jobs(
    variants: list[list[str]], searchpath: list[str], hydra_cfg, multirun: bool, first: DictConfig
) -> list[DictConfig]:
    """Each job's config, composed and validated; a mistake exits.
    `first`: the first variant's config, composed already. Inside initialize_config_dir."""
    from hydra import compose

    from harness.config.explain import base_of, explain
    from harness.ranks import global_rank
    from harness.report.optimized_metric import check_sweeper
    from harness.tasks.validate import check_types, notices, validate
    from harness.train.distributed.devices import check_launch, on_cluster

    jobs, said = [], []
    for index, variant in enumerate(variants):
        try:
            cfg = first if index == 0 else compose(config_name="train", overrides=searchpath + variant)
        except Exception as err:
            die(explain(err, variant, base_of(variant, searchpath)), err)
        given = [o.split("=")[0].lstrip("+~") for o in variant]
        # the config files' own values: the job's config itself where the command line gave top-level keys only
        # (group choices, n=2, +overwrite=true: an addition there builds nothing)
        base = cfg if all("." not in key for key in given) else base_of(variant, searchpath)
        try:  # the devices are held against this machine unless a cluster runs the job elsewhere
            check_types(cfg, base, given)
            validate(cfg, devices=not on_cluster(hydra_cfg.launcher))
            check_launch(cfg, hydra_cfg.launcher, multirun=multirun)  # DDP ranks that would never meet
            check_sweeper(cfg, hydra_cfg.sweeper, multirun=multirun)  # Optuna needs a number to optimize
        except ConfigError as err:
            die(str(err), err)
        said += [line for line in notices(cfg) if line not in said]
        jobs.append(cfg)
    for line in (
        said if global_rank() == 0 else []
    ):  # once for the sweep, before any job runs; by rank 0 alone
        print(f"warning: {line}", file=sys.stderr)
    return jobs


def _hydra_base(overrides: list[str], searchpath: list[str]):
    """The Hydra settings composed with the command line's group choices only (the config files' values), or None.
    Inside initialize_config_dir."""
    from hydra import compose

    from harness.config.explain import choices_of

    try:
        return compose(
            config_name="train", overrides=searchpath + choices_of(overrides), return_hydra_config=True
        ).hydra
    except Exception:  # the choices alone do not compose: nothing to explain against
        return None


def _check_targets(
    jobs: list[DictConfig], launcher, launcher_base, hydra_overrides: list[str], multirun: bool
) -> None:
    """Each job's parts' targets against their signatures and, for a sweep, its launcher as its plugin makes it
    (harness.tasks.targets); a refusal exits."""
    from harness.signals import Interrupted, received
    from harness.tasks.targets import check_launcher, check_targets

    try:
        for cfg in jobs:
            check_targets(cfg)
        if multirun:
            given = [o.split("=")[0].lstrip("+~") for o in hydra_overrides]
            check_launcher(launcher, None if launcher_base is None else launcher_base.launcher, given)
    except ConfigError as err:
        if (
            received() is not None
        ):  # a signal that landed inside a library being imported looks like its refusal
            raise Interrupted(received()) from None
        die(str(err), err)


def _variants_of(parsed: list) -> tuple[list[list[str]], list[str]]:
    """(the job configs' overrides: each sweep value with the first of every other, the Hydra settings' overrides)."""
    # each value once is enough to catch any single bad value
    variants, hydra_overrides = [[]], []
    for override in parsed:
        key = override.get_key_element()
        if key.lstrip("+~").startswith("hydra"):
            hydra_overrides.append(override.input_line)
            continue
        if override.is_delete():  # ~key (or ~key=value): as written, never as ~key=null
            values = None
        elif override.is_interval_sweep():  # Optuna's interval(low,high): its two ends stand for it
            values = [str(override.value().start), str(override.value().end)]
        elif override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        lines = [override.input_line] if values is None else [f"{key}={value}" for value in values]
        variants = [v + lines[:1] for v in variants] + [variants[0] + [line] for line in lines[1:]]
    return variants, hydra_overrides


def _check_folders(cfg, hydra_cfg, multirun: bool) -> None:
    """Exit where the run (or sweep) dir cannot be made or holds an earlier run, or data.root cannot be made."""
    # an existing data.root may be a read-only cache: checked when written
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    directory = str(hydra_cfg.sweep.dir if multirun else hydra_cfg.run.dir)
    _check_writable(key, directory)
    _check_earlier_runs(cfg, Path(directory), multirun)
    root = (cfg.get("data") or {}).get("root")
    if root is not None and not Path(str(root)).is_dir():
        _check_writable("data.root", str(root), example="data")


def _check_earlier_runs(cfg, directory: Path, multirun: bool) -> None:
    """Exit where the run dir, or a job dir of the sweep dir, holds a verdict check_run_dir refuses; with
    +overwrite=true rank 0 empties it. Not on a rank Lightning started (it works in rank 0's dir)."""
    from harness.ranks import global_rank, started_by_lightning

    if started_by_lightning():
        return
    try:
        from harness.tasks.job import check_run_dir

        (_check_sweep_dir if multirun else check_run_dir)(cfg, directory)
        overwrite = cfg.get("overwrite", False) is True and global_rank() == 0
        if overwrite and _overwrites_earlier_run(cfg, directory, multirun):
            _empty_out("hydra.sweep.dir" if multirun else "hydra.run.dir", directory)
    except ConfigError as err:
        die(str(err), err)


def _overwrites_earlier_run(cfg, directory: Path, multirun: bool) -> bool:
    """Whether `directory` holds an earlier run to replace: a verdict (not one this run resumes from), or in a sweep
    dir any job dir's."""
    if not Path(directory).is_dir():
        return False
    if multirun:
        return any(status_in(d) for d in Path(directory).iterdir() if d.is_dir())
    ckpt = cfg.get("ckpt_path")
    inside = ckpt not in (None, "last") and Path(directory).absolute() in Path(ckpt).absolute().parents
    return status_in(Path(directory)) is not None and not inside


def _empty_out(key: str, directory: Path) -> None:
    """Remove everything in `directory` before Hydra writes the new run's files; refused for a folder that holds the
    working directory."""
    import shutil

    directory = Path(directory).absolute()
    if directory == Path.home() or directory in (Path.cwd(), *Path.cwd().parents):
        raise ConfigError(
            key,
            str(directory),
            "+overwrite=true empties the run dir it replaces, and this one holds the working directory; "
            "give the run a folder of its own",
        )
    for entry in directory.iterdir():
        try:  # ranks started with this one may be writing their first files meanwhile
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue


def _check_writable(key: str, directory: str, example: str = "outputs/...") -> None:
    """Exit now where `directory` cannot be made, not after the work is done."""
    import tempfile

    existing = Path(directory).absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as err:
        die(
            f"{key}={directory}: cannot write there ({err.strerror or err}); pick a writable folder, "
            f"e.g. {key}={example}",
            err,
        )


def _check_sweep_dir(cfg: DictConfig, sweep_dir: Path) -> None:
    """Refuse a sweep dir any of whose job dirs holds a verdict, unless `+overwrite=true`."""
    if cfg.get("overwrite", False) is True or not Path(sweep_dir).is_dir():
        return
    held = next((d for d in sorted(Path(sweep_dir).iterdir()) if status_in(d)), None)
    if held is not None:
        raise ConfigError(
            "hydra.sweep.dir",
            str(sweep_dir),
            f"already holds a sweep ({held.name}/verdict.json) that this one would overwrite; "
            "choose another folder, or give +overwrite=true",
        )


def with_fixed_mode(argv: list[str], mode: str) -> list[str]:
    """`argv` of an entry that runs one mode (eval.py), with `mode=<mode>` first; another mode given exits."""
    given = [a for a in argv if a.lstrip("+~").split("=")[0] == "mode"]
    if any(a != f"mode={mode}" for a in given):
        die(f"{given[0]}: this entry runs mode={mode}; leave mode out (python train.py {given[0]} trains)")
    return argv if given else [f"mode={mode}", *argv]
