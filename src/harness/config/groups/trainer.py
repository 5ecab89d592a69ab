"""The run's machinery, each key declared once (conf/<group>/*.yaml pick an option and keep their comments): trainer
(`Trainer`, `Distributed`, `Sharded`), logger (`CSV`, `TensorBoard`, `Wandb`, `MLflow`), callbacks, debug, perf and
paths, with OPTIONS_<GROUP> for each. No torch or Lightning."""

# The trainer and callbacks classes subclass dict: a trainer node is Lightning's keyword arguments, open to any other
# (+trainer.NAME=value, or a preset's trainer.NAME such as debug=fdr's fast_dev_run), and callbacks a set a preset
# adds to; their declared keys keep their types and ranges, and a misspelled key is still refused.

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig

from harness.config.declare import declared_fields, key
from harness.errors import ConfigError

#: trainer.precision's choices: Lightning's _PRECISION_INPUT, its ints, names and aliases
# fmt: off
PRECISIONS = (64, 32, 16, "transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true",
              "bf16-mixed", "32-true", "64-true", "64", "32", "16", "bf16")
# fmt: on
#: trainer.accelerator's names: auto, gpu and those of Lightning's AcceleratorRegistry (a _target_ builds another)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
#: trainer=fsdp's trainer.strategy.mixed_precision (harness.train.distributed.sharding.PRECISIONS, without torch)
SHARD_PRECISIONS = ("bf16", "fp16")
#: logger.wandb.mode's choices (harness.train.loggers.wandb_logger sets WANDB_MODE from it)
WANDB_MODES = ("offline", "online", "disabled")

#: Lightning's other Trainer arguments (+trainer.NAME=..., undeclared: Hydra refuses + for a declared key) that it
#: checks only once fitting, past the build that names a refused key: name -> (least whole number, what it is)
CHECKED_LATE = {"accumulate_grad_batches": (1, "batches a step's gradient sums over")}
#: the perf keys whose range excludes its low end, 0
PERF_ABOVE_ZERO = ("peak_flops", "data_wait")


def _nested(cls, doc: str):
    """A field holding a nested declaration, `cls`'s defaults copied for each config."""
    return dataclasses.field(default_factory=cls, metadata={"doc": doc})


def _check_accelerator(accelerator) -> None:
    """An accelerator Lightning names but cannot load here: tpu without torch_xla (Lightning refuses it late)."""
    if accelerator == "tpu" and importlib.util.find_spec("torch_xla") is None:
        fix = "it needs the torch_xla package, which is not installed; use trainer.accelerator=auto"
        raise ConfigError("trainer.accelerator", accelerator, fix)


def _check_init_weights(target) -> None:
    """meta_init builds the model on the meta device: its class must make its own weights, init_weights()."""
    try:
        model = get_object(target)
    except Exception:  # a target that does not import: the door names it with its key
        return
    if not callable(getattr(model, "init_weights", None)):
        raise ConfigError(
            "trainer.strategy.meta_init",
            "true",
            f"{getattr(model, '__name__', target)} has no init_weights(): built on the meta device, its weights exist "
            "only once sharded, as empty memory; give it an init_weights() that sets every parameter and buffer "
            "(harness.models.GPT has one), or keep meta_init=false",
        )


def _check_late(node: DictConfig) -> None:
    """CHECKED_LATE's arguments the trainer node was given, held to Lightning's rule at the door."""
    for name, (least, what) in CHECKED_LATE.items():
        value = node.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            fix = f"must be a whole number >= {least}; {what} (try +trainer.{name}={least + 1})"
            raise ConfigError(f"trainer.{name}", value, fix)


@dataclass
class Trainer(dict[str, Any]):
    """trainer=cpu, and trainer=gpu (its yaml sets accelerator and precision): pytorch_lightning.Trainer's keyword
    arguments; any other is added with +trainer.NAME=value."""

    accelerator: Any = key("cpu", "cpu | gpu | cuda | mps | tpu | auto (or a _target_)", choices=ACCELERATORS)
    devices: Any = key(1, "processes (or GPUs): a count, a list of device ids, or auto")
    precision: Any = key(
        "32-true", "32-true (fp32) | bf16-mixed | 16-mixed | bf16-true | 64-true | ...", choices=PRECISIONS
    )
    gradient_clip_val: float | None = key(
        1.0,
        "clip the global gradient norm to this (null: no clipping): keeps recurrent models stable",
        low=0.0,
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        _check_accelerator(node.get("accelerator"))
        _check_late(node)


@dataclass
class Distributed(Trainer):
    """trainer=ddp: one process a device, gradients all-reduced (NCCL on GPUs, gloo on CPU)."""

    accelerator: Any = key("auto", "GPUs where there are some, else CPU processes", choices=ACCELERATORS)
    devices: Any = key(2, "processes on this machine (at most its GPUs, or its CPU cores)")
    num_nodes: int = key(
        1, "machines; more than 1 needs a cluster to start them (hydra/launcher=slurm)", low=1, whole=True
    )
    strategy: Any = key(
        "ddp", "ddp: each rank a normal process that builds its own data and model (not ddp_spawn)"
    )


@dataclass
class FSDP:
    """trainer=fsdp's strategy: harness.train.distributed.sharding.FSDP, FSDP2 through ModelParallelStrategy."""

    _target_: str = "harness.train.distributed.sharding.FSDP"
    mixed_precision: str | None = key(
        None,
        "null: fp32 | bf16 | fp16: weights gathered and computed in it, gradients reduced in fp32",
        choices=SHARD_PRECISIONS,
    )
    activation_checkpointing: bool = key(False, "true: each block's activations recomputed in the backward")
    reshard_after_forward: bool = key(True, "free a block's gathered weights after its forward (false: kept)")
    save_distributed_checkpoint: bool = key(False, "false: one consolidated last.ckpt; true: a shard a rank")
    meta_init: bool = key(
        False, "true: the model built on the meta device, each rank its slice by init_weights()"
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        if node.get("meta_init") is True:
            _check_init_weights((cfg.get("model") or {}).get("_target_"))


@dataclass
class Sharded(Distributed):
    """trainer=fsdp: like ddp, but every rank holds 1/ranks of each weight, gradient and optimizer state."""

    strategy: Any = _nested(FSDP, "the sharded strategy and its settings")
    precision: Any = key(
        "32-true", "keep 32-true: the strategy's mixed_precision sets the compute dtype", choices=PRECISIONS
    )


@dataclass
class CSV:
    """logger=csv: no tracker; metrics.csv in the run dir (written whichever loggers are chosen)."""


@dataclass
class TensorBoard:
    """logger=tensorboard: event files in <run dir>/<name>/, the composed config in its HPARAMS tab."""

    name: str = key("tensorboard", "the folder of the run dir it writes to")


@dataclass
class Wandb:
    """logger=wandb: Weights & Biases, offline unless told (`wandb sync <run dir>/wandb` uploads it)."""

    mode: str = key(
        "offline", "offline (no network at all) | online (needs an API key) | disabled", choices=WANDB_MODES
    )
    project: str = key("harness", "the wandb project")
    entity: str | None = key(None, "the wandb team or user; null: your default")
    run_name: str | None = key(None, "null: wandb picks one")
    group: str | None = key(None, "e.g. a sweep's name, to group its jobs")
    id: str | None = key(None, "null: a new id (or the one kept in the run dir); an id: continue that run")
    tags: list[str] = key([], "labels of this tracker alone, added to the top-level tags")


@dataclass
class MLflow:
    """logger=mlflow: a local SQLite store, <run dir>/mlflow.db, unless given a server."""

    experiment: str = key("harness", "the MLflow experiment the run goes under")
    run_name: str | None = key(None, "null: MLflow picks one")
    tracking_uri: str | None = key(None, "null: sqlite:///<run dir>/mlflow.db; a server's address logs there")


@dataclass
class ModelSummaryKeys:
    """callbacks.model_summary: Lightning's ModelSummary (RichModelSummary with callbacks=rich)."""

    _target_: str = "pytorch_lightning.callbacks.ModelSummary"
    max_depth: int = key(
        2, "module depth shown: 1 the model alone, 2 its children, -1 every module", low=-1, whole=True
    )
    enabled: bool = key(
        "${oc.select:trainer.enable_model_summary,true}", "+trainer.enable_model_summary=false: off"
    )


@dataclass
class ProgressBarKeys:
    """callbacks.progress_bar: Lightning's TQDMProgressBar (RichProgressBar with callbacks=rich)."""

    _target_: str = "pytorch_lightning.callbacks.TQDMProgressBar"
    refresh_rate: int = key(
        1, "steps between redraws (raise it for a log file or a slow terminal)", low=0, whole=True
    )
    enabled: bool = key("${oc.select:mode.progress_bar,false}", "the mode decides whether a bar is shown")


@dataclass
class EarlyStoppingKeys:
    """callbacks.early_stopping: Lightning's EarlyStopping, counted in validations (mode.val_every)."""

    _target_: str = "pytorch_lightning.callbacks.EarlyStopping"
    monitor: str = key("val/loss", "the metric watched (val/loss, val/acc, val/p_correct)")
    mode: str = key("min", "min: lower is better (max for val/acc)", choices=("min", "max"))
    patience: int = key(3, "validations with no improvement before stopping", low=0, whole=True)
    min_delta: float = key(0.0, "a smaller change does not count as an improvement", low=0.0)
    verbose: bool = key(False, "true: log every check")


@dataclass
class Callbacks(dict[str, Any]):
    """callbacks=default, and callbacks=rich (its yaml names Rich's classes): each entry a callback built from its
    _target_, null or enabled=false left out; a preset or +callbacks.NAME._target_=... adds one."""

    model_summary: ModelSummaryKeys | None = _nested(
        ModelSummaryKeys, "the model's layers, printed at the start"
    )
    progress_bar: ProgressBarKeys | None = _nested(
        ProgressBarKeys, "the progress bar, when mode.progress_bar"
    )


@dataclass
class WithEarlyStopping(Callbacks):
    """callbacks=early_stopping: the default callbacks, then early stopping on val/loss."""

    early_stopping: EarlyStoppingKeys | None = _nested(
        EarlyStoppingKeys, "training ends once the metric stalls"
    )


@dataclass
class Debug:
    """debug=<option> (its yaml, @package _global_, places this at `debug`): what the verdict calls the run."""

    name: str = key("debug", "verdict.json's `debug`")
    judge: bool = key(True, "true: judged PASS/FAIL/DONE as usual; false: status DEBUG, exit 0")


@dataclass
class Anomaly(Debug):
    """debug=anomaly: torch's anomaly detection; a normal run, watched."""

    name: str = key("anomaly", "verdict.json's `debug`")


@dataclass
class Profiler(Debug):
    """debug=profiler: Lightning's simple profiler; a normal run, measured."""

    name: str = key("profiler", "verdict.json's `debug`")


@dataclass
class FastDevRun(Debug):
    """debug=fdr: one batch of train and val; not judged."""

    name: str = key("fdr", "verdict.json's `debug`")
    judge: bool = key(False, "a one-batch run cannot PASS or FAIL: status DEBUG")


@dataclass
class Limit(Debug):
    """debug=limit: a few batches, loggers and checkpoints on; not judged."""

    name: str = key("limit", "verdict.json's `debug`")
    judge: bool = key(False, "too short to PASS or FAIL: status DEBUG")


@dataclass
class HostSyncKeys:
    """perf.symptoms.host_sync: copies device to host that code outside the harness asks for in a step."""

    enabled: bool = key(True, "false: not watched")
    steps: list[int] = key(
        [3, 7], "the steps watched (>= 0), each moved on to the next one Lightning logs nothing on"
    )
    sites: int = key(5, "at most this many lines named, those that copy most first", low=1, whole=True)
    min_per_step: float = key(
        2, "copies on one call path a micro-batch that name an installed library's line", low=1
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        steps = list(node.get("steps") or [])
        if any(step < 0 for step in steps):
            raise ConfigError("perf.symptoms.host_sync.steps", steps, "give steps >= 0, e.g. [3, 7]")


@dataclass
class RecompilesKeys:
    """perf.symptoms.recompiles: with compile, a function of the training forward compiled again and again."""

    enabled: bool = key(True, "false: not watched")
    allowed: int = key(2, "compilations after a function's first not counted", low=0, whole=True)


@dataclass
class StragglerKeys:
    """perf.symptoms.straggler: on several ranks, one rank's time outside collectives persistently above the rest."""

    enabled: bool = key(True, "false: not watched")
    every: int = key(10, "steps a reading covers", low=1, whole=True)
    patience: int = key(3, "readings in a row the same rank must be behind", low=1, whole=True)
    min_ms: float = key(
        10.0, "ms a step the rank is behind by at least (rank 0's logging costs it ~1 ms)", low=0.0
    )
    fraction: float = key(
        0.2, "the share of the step it is behind by at least, in [0, 1)", low=0.0, high=1.0, below=True
    )


@dataclass
class Symptoms:
    """perf.symptoms: what else keeps the steps from going faster, each watch null or enabled=false to skip it."""

    host_sync: HostSyncKeys | None = _nested(HostSyncKeys, "device-to-host copies inside a step")
    recompiles: RecompilesKeys | None = _nested(RecompilesKeys, "compile=true: recompilations")
    straggler: StragglerKeys | None = _nested(StragglerKeys, "several ranks: the one behind")


@dataclass
class Perf:
    """perf=default: harness.train.perf.speed.Speed, the speed figures and the time split, and the symptoms."""

    _target_: str = "harness.train.perf.speed.Speed"
    enabled: bool = key(True, "false: no perf/ figures, no time split, no symptoms")
    flops: bool = key(
        True, "count the model's FLOPs once, a forward and backward of the first batch (perf/mfu)"
    )
    peak_flops: float | None = key(
        None, "one device's peak FLOP/s for perf/mfu; null: looked up or measured", low=0.0
    )
    peak_cache: str = key(
        "${paths.data_dir}/perf_peaks.json", "the CPU's measured peaks, by CPU model, threads, dtype"
    )
    warmup: int = key(
        5,
        "logging steps the verdict's medians leave out: those holding one of the first `warmup`",
        low=0,
        whole=True,
    )
    data_wait: float = key(
        0.3, "the share of the steps' time waiting on the loader that is a symptom", low=0.0, high=1.0
    )
    window: int = key(50, "steps the data_wait share is taken over (past the warm-up)", low=1, whole=True)
    symptoms: Symptoms = _nested(Symptoms, "the watches, each reported once as a symptom")

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        for item in declared_fields(Perf):
            value = node.get(item.name)
            if item.name in PERF_ABOVE_ZERO and isinstance(value, (int, float)) and value <= 0:
                tried = f"perf.{item.name}={item.default if item.default is not None else 'null'}"
                raise ConfigError(f"perf.{item.name}", value, f"must be above 0; {item.doc} (try {tried})")


@dataclass
class Paths:
    """paths=default: where data and outputs live, each from an environment variable first."""

    data_dir: str = key(
        "${oc.env:HARNESS_DATA_DIR,data}", "datasets, generated or prepared once and reused (data.root)"
    )
    log_dir: str = key("${oc.env:HARNESS_LOG_DIR,outputs}", "every run and sweep; ckpt_path=last looks here")
    output_dir: str = key(
        "${hydra:runtime.output_dir}", "this run's folder (hydra.run.dir): a callback's files"
    )


#: conf/trainer/<option>.yaml -> its declaration (ConfigStore: trainer/<option>_schema)
OPTIONS_TRAINER = {"cpu": Trainer, "gpu": Trainer, "ddp": Distributed, "fsdp": Sharded}
#: conf/logger/<option>.yaml -> its declaration, each at logger.<option>
OPTIONS_LOGGER = {"csv": CSV, "tensorboard": TensorBoard, "wandb": Wandb, "mlflow": MLflow}
#: conf/callbacks/<option>.yaml -> its declaration
OPTIONS_CALLBACKS = {"default": Callbacks, "early_stopping": WithEarlyStopping, "rich": Callbacks}
#: conf/debug/<option>.yaml -> its declaration, at debug
OPTIONS_DEBUG = {"anomaly": Anomaly, "fdr": FastDevRun, "limit": Limit, "profiler": Profiler}
#: conf/perf/<option>.yaml -> its declaration
OPTIONS_PERF = {"default": Perf}
#: conf/paths/<option>.yaml -> its declaration
OPTIONS_PATHS = {"default": Paths}
