"""The probes group's keys, each declared once (conf/probes/*.yaml pick one and keep their comments): `Probes`
(probes=default: its settings and a class per built-in probe, `NormsKeys` ... `WatchKeys`), `ProbesOff`. The probes
read their bounds from here too (`check_logit_period`, `check_above_zero`)."""

# A key typed Any (activations.every, logits.every) also takes a per-mode value, {overfit: A, full: B}, of which
# harness.probes.assemble picks the run's; each mode's value is held to the key's declaration at the door (Probes'
# rules). A fork's probe goes under `extra` (free: its class checks its arguments when built).

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config.declare import check_declared, declared_fields, key
from harness.errors import ConfigError

#: the modes a per-mode value names, `{overfit: A, full: B}`: short overfit runs can afford a denser reading
MODES = ("overfit", "full")
#: the symptoms' thresholds that must be above 0, not at it: name -> why
ABOVE_ZERO = {
    "diverge_rise": "0 names a flat loss's noise",
    "layer_ratio": "its inverse bounds the exploding side",
}


def _period(default, doc: str):
    """A probe's `every`: steps between two readings, a whole number >= 1, or null (never)."""
    return key(default, doc, low=1, whole=True)


def _full():
    return key(True, "also on in mode=full (false: overfit mode only)")


def check_logit_period(name: str, every) -> None:
    """Refuse a logits period other than log (with the run's own metrics), a whole number >= 1 or null."""
    whole = isinstance(every, int) and not isinstance(every, bool) and every >= 1
    if every is not None and every != "log" and not whole:
        raise ConfigError(name, every, "give log (with the run's own metrics), a whole number >= 1, or null")


def check_above_zero(name: str, value) -> None:
    """Refuse a value of ABOVE_ZERO's threshold `name` (the last part of a dotted key) that is not a number > 0."""
    item = next(i for i in declared_fields(SymptomsKeys) if i.name == name.rpartition(".")[2])
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        why = ABOVE_ZERO[item.name]
        raise ConfigError(
            name, value, f"must be a number > 0 ({why}); {item.doc} (try {name}={item.default})"
        )


@dataclass
class NormsKeys:
    """probes.norms: per parameter, where the optimizer reads them: grad_norm/ (+ total, missing), weight_norm/,
    update_ratio/."""

    _target_: str = "harness.probes.layers.norms.ParameterNorms"
    every: int | None = _period(1, "steps between gradient norms (a logging step costs one host transfer)")
    weight_every: int | None = _period(
        20, "steps between weight norms (each reads every weight; 1: every step)"
    )
    ratio_every: int | None = _period(20, "steps between update ratios ‖Δw‖/‖w‖ (each copies the weights)")
    full: bool = _full()


@dataclass
class DeadKeys:
    """probes.dead: a parameter whose gradient stays zero, reported once by name (console, dead_params)."""

    _target_: str = "harness.probes.layers.dead.DeadGradients"
    every: int | None = _period(1, "steps between reading the streaks (they count on the device every step)")
    patience: int = key(
        10, "steps in a row a gradient is zero, missing or below threshold", low=1, whole=True
    )
    threshold: float | None = key(
        None, "gradient norm counted as zero; null: the dtype's smallest normal", low=0.0
    )
    full: bool = _full()


@dataclass
class HistogramsKeys:
    """probes.histograms: gradient and weight histograms per parameter; their min/max/mean/std in the CSV."""

    _target_: str = "harness.probes.layers.histograms.Histograms"
    every: int | None = _period(
        100, "steps between histograms (each reads every gradient and weight 4 times)"
    )
    bins: int = key(64, "buckets per histogram", low=1, whole=True)
    full: bool = _full()


@dataclass
class LogitsKeys:
    """probes.logits: logit/p_correct, entropy, top1 at the masked positions."""

    _target_: str = "harness.probes.tokens.logits.LogitMass"
    every: Any = key("log", "log (with the run's own metrics: mode.log_every), or steps between readings")
    full: bool = _full()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        if not isinstance(node.get("every"), DictConfig):  # a per-mode value: each mode's, by Probes' rules
            check_logit_period("probes.logits.every", node.get("every"))


@dataclass
class DatapointsKeys:
    """probes.datapoints: fixed examples decoded (input, target, prediction, loss), greedy continuations."""

    _target_: str = "harness.probes.tokens.datapoints.Datapoints"
    every: int | None = _period(
        100, "steps between dumps (and one at the end); each a forward of the examples"
    )
    examples: int = key(4, "examples shown of each split (training, validation)", low=1, whole=True)
    prompts: int = key(
        3, "mode=full on text: greedy continuations of fixed prompts (0: none)", low=0, whole=True
    )
    tokens: int = key(32, "characters each continuation adds", low=0, whole=True)
    generate_every: int = key(1000, "steps between continuations (each `tokens` forwards)", low=1, whole=True)
    full: bool = _full()


@dataclass
class EmbeddingsKeys:
    """probes.embeddings: a 2-D PCA of the token embeddings, in the tracker and as embeddings.png."""

    _target_: str = "harness.probes.tokens.embeddings.Embeddings"
    every: int | None = _period(100, "steps between projections (and one at the end)")
    full: bool = _full()


@dataclass
class GradByPositionKeys:
    """probes.grad_by_position: ‖∂L/∂input_t‖ per position on a fixed batch (verdict.json reach)."""

    _target_: str = "harness.probes.tokens.by_position.GradByPosition"
    every: int | None = _period(
        100, "steps between measurements (+ one at each end); each a forward and backward"
    )
    examples: int = key(4, "training examples in the fixed batch", low=1, whole=True)
    full: bool = _full()


@dataclass
class ReseedKeys:
    """probes.reseed: hashes of each step's batch and random state (verdict.json inputs_identical)."""

    _target_: str = "harness.probes.tokens.reseed.ReseedProof"
    every: int | None = _period(1, "steps between hashes")
    full: bool = key(True, "built in mode=full too, where nothing is re-seeded: it hashes nothing")


@dataclass
class ActivationsKeys:
    """probes.activations: every module's training-forward output (act/<module>/rms, mean, zero_frac, ...)."""

    _target_: str = "harness.probes.layers.activations.Activations"
    every: Any = _period({"overfit": 20, "full": 50}, "steps between readings (each about a third of a step)")
    include: list[str] = key(["*"], "module names watched (fnmatch patterns, e.g. blocks.*.mlp.*)")
    exclude: list[str] = key([], "module names left out of those, e.g. ['*.dropout']")
    full: bool = _full()


def _at_least_0(default: float, doc: str):
    return key(default, doc, low=0.0)


def _fraction(default: float, doc: str):
    return key(default, doc, low=0.0, high=1.0)


@dataclass
class SymptomsKeys:
    """probes.symptoms: the detectors, reading the rows above and the loss (verdict.json symptoms)."""

    _target_: str = "harness.probes.detectors.Symptoms"
    every: int | None = _period(
        10, "steps between readings of the loss (every step's is judged) and the layers"
    )
    fail: bool = key(False, "true: any symptom ends a PASS/DONE run as SYMPTOM, exit 5 (for CI)")
    window: int = key(
        100, "steps the loss rules look back over (no_progress waits this long)", low=2, whole=True
    )
    patience: int = key(3, "readings in a row a layer must be past its threshold", low=1, whole=True)
    layer_ratio: float = key(
        1e-3, "vanishing_gradients: the first block's gradient RMS below this of the last's"
    )
    reach: float = _at_least_0(0.0, "... or the input-gradient reach at the end at or below this")
    explode_jump: float = _at_least_0(100.0, "exploding_gradients: the total norm this many times its median")
    explode_growth: float = _at_least_0(
        100.0, "... or its median of the last 5 readings this many times the first 5's"
    )
    explode_norm: float = _at_least_0(1000.0, "... or above this `patience` steps in a row")
    dead_fraction: float = _fraction(
        0.9, "dead_units: this fraction of a ReLU-like module's outputs exactly zero"
    )
    dead_units: float = _fraction(
        0.25, "... or this fraction of its units dead (|y| <= 1e-6 at every position)"
    )
    saturated_fraction: float = _fraction(
        0.6, "saturated_activations: this fraction saturated from the first reading"
    )
    saturated_late: float = _fraction(0.9, "... or this fraction, once training saturated it")
    spike_factor: float = _at_least_0(
        2.0, "loss_spike: the loss this many times its running median (20 steps)"
    )
    spike_min: float = _at_least_0(0.1, "... and above it by this fraction of the initial loss")
    spike_sigmas: float = _at_least_0(6.0, "... and by this many robust standard deviations of those 20")
    spike_stay: int = key(8, "... for this many steps in a row (a spike that stays)", low=1, whole=True)
    spikes: int = key(2, "... or this many separate spikes within the window", low=1, whole=True)
    diverge_rise: float = key(
        0.5, "divergence: the loss's running median above its lowest by this of the initial"
    )
    diverge_stay: int = key(20, "... for this many steps in a row", low=1, whole=True)
    progress: float = _at_least_0(
        0.05, "no_progress: the loss within this fraction of its start after `window`"
    )
    ratio_high: float = _at_least_0(1.0, "update_ratio: a weight matrix's ‖Δw‖/‖w‖ above this (lr too high)")
    ratio_low: float = _at_least_0(
        1e-6, "... or below this while the loss is above half its start (lr far too low)"
    )
    full: bool = _full()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        for name in ABOVE_ZERO:
            check_above_zero(f"probes.symptoms.{name}", node.get(name))


@dataclass
class RanksKeys:
    """probes.ranks: on 2+ ranks, a checksum of every replicated parameter compared across them (ranks_diverged)."""

    _target_: str = "harness.probes.layers.agreement.RankAgreement"
    every: int | None = _period(
        10, "steps between comparisons (each one all-reduce of 2 numbers a parameter)"
    )
    full: bool = _full()


@dataclass
class WatchKeys:
    """probes.watch: wandb's own wandb.watch, on with probes.wandb_watch."""

    _target_: str = "harness.probes.wandb_watch.WandbWatch"
    enabled: bool = key("${..wandb_watch}", "built only when probes.wandb_watch is true")
    every: int = key(10, "wandb.watch's log_freq", low=1, whole=True)
    log: str = key("all", "what wandb.watch logs", choices=("gradients", "parameters", "all"))


def _entry(keys):
    """A built-in probe's entry: its keys, or null (left out: probes.histograms=null); its doc, the class's."""
    return field(default_factory=keys, metadata={"doc": " ".join(keys.__doc__.split()) + " null: left out"})


@dataclass
class Probes:
    """probes=default: what is logged while training and how often; every entry with a `_target_` is a probe,
    its arguments plus the builder's `full` and `enabled` (harness.probes.assemble)."""

    _target_: str = "harness.probes.from_config"
    _recursive_: bool = key(False, "the entries are built by the builder, not by Hydra before it")
    enabled: bool = key(True, "false turns every probe off (the same as probes=off)")
    plots: bool = key(True, "PNGs in the run dir at the end: p_correct, embeddings, grad_by_position")
    wandb_watch: bool = key(
        False, "true adds wandb.watch(model, log=all) (logger=wandb; it syncs per tensor: slow)"
    )
    extra: Any = key(
        {}, "your own probes by name, each {_target_: a Probe or Callback class, ...its arguments}"
    )
    norms: NormsKeys | None = _entry(NormsKeys)
    dead: DeadKeys | None = _entry(DeadKeys)
    histograms: HistogramsKeys | None = _entry(HistogramsKeys)
    logits: LogitsKeys | None = _entry(LogitsKeys)
    datapoints: DatapointsKeys | None = _entry(DatapointsKeys)
    embeddings: EmbeddingsKeys | None = _entry(EmbeddingsKeys)
    grad_by_position: GradByPositionKeys | None = _entry(GradByPositionKeys)
    reseed: ReseedKeys | None = _entry(ReseedKeys)
    activations: ActivationsKeys | None = _entry(ActivationsKeys)
    symptoms: SymptomsKeys | None = _entry(SymptomsKeys)
    ranks: RanksKeys | None = _entry(RanksKeys)
    watch: WatchKeys | None = _entry(WatchKeys)

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        per_mode = _per_mode_keys(node)
        for mode in MODES if per_mode else ():
            _check_one_mode(node, per_mode, mode)


def _per_mode_keys(node: DictConfig) -> list[tuple[str, str]]:
    """(entry, argument) of each built-in entry's argument given per mode, {overfit: A, full: B}."""
    found = []
    for entry in node:
        child = node._get_node(entry)
        if isinstance(child, DictConfig) and not child._is_none() and OmegaConf.get_type(child) is not dict:
            for name in child:
                value = child._get_node(name)
                if isinstance(value, DictConfig) and set(value.keys()) == set(MODES):
                    found.append((str(entry), str(name)))
    return found


def _check_one_mode(node: DictConfig, per_mode: list[tuple[str, str]], mode: str) -> None:
    """Hold each entry with a per-mode argument, as a run of `mode` builds it (that argument its `mode` value), to
    its declaration; a refusal of one of those names the per-mode key (probes.activations.every.full=0)."""
    picked = {entry: copy.deepcopy(node[entry]) for entry in dict.fromkeys(entry for entry, _ in per_mode)}
    for entry, name in per_mode:
        picked[entry][name] = node[entry][name][mode]
    try:  # the entries alone: their own checks and rules, not these rules again
        check_declared(OmegaConf.create({"probes": picked}))
    except ConfigError as err:
        if err.key not in {f"probes.{entry}.{name}" for entry, name in per_mode}:
            raise
        raise ConfigError(f"{err.key}.{mode}", err.value, err.fix) from None


@dataclass
class ProbesOff:
    """probes=off: no probes, the training loop alone (benchmarks compare against it)."""

    _target_: str = "harness.probes.from_config"
    _recursive_: bool = key(False, "the builder reads the keys below")
    enabled: bool = key(False, "every probe off")


#: conf/probes/<option>.yaml -> its declaration (ConfigStore: probes/<option>_schema)
OPTIONS = {"default": Probes, "off": ProbesOff}
