"""The training objective's groups, each key declared once (conf/optim, conf/schedule, conf/loss pick one and keep
their comments): `AdamW`, `SGD` with torch's rules; `Schedule` (constant, cosine, linear) and `check_schedule`, which
harness.train.optim.schedule calls too; `CrossEntropy`, `LabelSmoothing`, `ZLoss`. No torch."""

# torch refuses these values only when it builds the optimizer; the door builds nothing, so each of torch's rules is
# a range here or a class's `rules`. eps and dampening are torch's arguments no yaml sets: given with +optim.eps=...,
# they stay undeclared (a declared key refuses the +) and are still held to torch's rule.

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from harness.config.declare import check_declared, key
from harness.errors import ConfigError

#: the shapes of harness.train.optim.schedule after its warmup
SHAPES = ("constant", "cosine", "linear")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fused_or_foreach(node: DictConfig) -> None:
    """torch's fused and foreach steps are two ways of one update: either, never both."""
    if node.get("fused") and node.get("foreach"):
        raise ConfigError(
            "optim.foreach",
            "true",
            f"{node.get('_target_')} refuses it with optim.fused=true (one fused kernel or foreach, not both); "
            "set optim.fused=false with it, or optim.foreach=null",
        )


@dataclass
class AdamW:
    """optim=adamw: AdamW (decoupled weight decay), the default; harness passes it two parameter groups."""

    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = key(
        3e-3, "the peak learning rate (the schedule scales it step by step), 0: no learning", low=0.0
    )
    weight_decay: float = key(0.0, "decoupled weight decay of the matrices", low=0.0)
    betas: list[float] = key([0.9, 0.99], "Adam's two moment decay rates, each in [0, 1)")
    foreach: bool | None = key(None, "null: torch picks; true needs optim.fused=false")
    fused: bool | None = key(
        True, "one fused kernel for the whole update, which skips a non-finite step's on the device"
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        betas = node.get("betas")
        if betas is not None and (len(betas) != 2 or not all(_is_number(b) and 0 <= b < 1 for b in betas)):
            raise ConfigError(
                "optim.betas",
                list(betas),
                f"{node.get('_target_')} refuses it (two decay rates, each in [0, 1)); try optim.betas=[0.9,0.99]",
            )
        eps = node.get("eps")
        if eps is not None and not (_is_number(eps) and eps >= 0):
            raise ConfigError(
                "optim.eps", eps, f"{node.get('_target_')} refuses it (must be >= 0); try optim.eps=1e-8"
            )
        _fused_or_foreach(node)


@dataclass
class SGD:
    """optim=sgd: SGD with momentum; harness passes it the same two parameter groups."""

    _target_: str = "torch.optim.SGD"
    _partial_: bool = True
    lr: float = key(
        0.1, "the peak learning rate (the schedule scales it step by step), 0: no learning", low=0.0
    )
    momentum: float = key(0.9, "heavy-ball momentum", low=0.0)
    nesterov: bool = key(False, "Nesterov momentum: needs optim.momentum > 0 and no dampening")
    weight_decay: float = key(
        0.0, "L2 penalty of the matrices (norms, biases and embeddings are never decayed)", low=0.0
    )
    fused: bool | None = key(
        True, "one fused kernel for the update, which skips a non-finite step's on the device"
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        momentum, dampening = node.get("momentum", 0), node.get("dampening", 0)
        if node.get("nesterov") is True and _is_number(momentum) and (momentum <= 0 or dampening != 0):
            fix = (
                f"optim.momentum=0.9 (not {momentum})"
                if momentum <= 0
                else f"optim.dampening=0 (not {dampening})"
            )
            raise ConfigError(
                "optim.nesterov",
                "true",
                f"{node.get('_target_')} refuses it (Nesterov momentum needs a momentum and zero dampening); "
                f"set {fix}, or optim.nesterov=false",
            )
        _fused_or_foreach(node)


@dataclass
class Schedule:
    """schedule=constant|cosine|linear: harness.train.optim.schedule, a linear warmup then the shape; harness passes
    the optimizer and total_steps (mode.max_steps)."""

    _target_: str = "harness.train.optim.schedule"
    _partial_: bool = True
    shape: str = key(
        "constant", "after the warmup: stay at optim.lr, or a cosine or a line down to min_lr", choices=SHAPES
    )
    warmup_steps: int = key(0, "linear warmup from optim.lr / warmup_steps up to optim.lr", low=0, whole=True)
    min_lr: float | None = key(
        None, "where cosine and linear end, between 0 and optim.lr; null: optim.lr / 10", low=0.0
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        peak = (cfg.get("optim") or {}).get("lr", 0.0)  # a fork's optimizer without lr: 0
        min_lr = node.get("min_lr")
        if _is_number(min_lr) and _is_number(peak) and not min_lr <= peak:
            raise ConfigError("schedule.min_lr", min_lr, f"must lie between 0 and optim.lr={peak}, or null")


def check_schedule(shape, warmup_steps, min_lr, peak: float) -> None:
    """harness.train.optim.schedule's arguments held to `Schedule`'s declaration, as the door holds a config's:
    a schedule built from code, not from the config, is refused in the same words."""
    given = {"shape": shape, "warmup_steps": warmup_steps, "min_lr": min_lr}
    try:
        node = OmegaConf.structured(Schedule(**given))
    except ValidationError as err:  # a kind the declaration's type refuses, e.g. warmup_steps=1.5
        name = str(err.full_key or err.key)
        kind = Schedule.__dataclass_fields__[name].type if name in given else "of its declared type"
        raise ConfigError(
            f"schedule.{name}", given.get(name), f"must be {kind} ({Schedule.__qualname__})"
        ) from None
    check_declared(OmegaConf.create({"optim": {"lr": peak}, "schedule": node}))


@dataclass
class CrossEntropy:
    """loss=cross_entropy: the mean of -log p(target) over the loss mask, every task's default."""

    _target_: str = "harness.ops.loss.CrossEntropy"


@dataclass
class LabelSmoothing:
    """loss=label_smoothing: cross entropy against a target with `smoothing` spread over every class."""

    _target_: str = "harness.ops.loss.LabelSmoothing"
    smoothing: float = key(
        0.1, "the share of the target spread over every class", low=0.0, high=1.0, below=True
    )


@dataclass
class ZLoss:
    """loss=z_loss: cross entropy plus weight x log-sum-exp(logits)^2 (PaLM's z-loss)."""

    _target_: str = "harness.ops.loss.ZLoss"
    weight: float = key(1e-4, "the z term's weight", low=0.0)


#: conf/optim/<option>.yaml -> its declaration (ConfigStore: optim/<option>_schema)
OPTIONS_OPTIM = {"adamw": AdamW, "sgd": SGD}
#: conf/schedule/<option>.yaml -> its declaration: one class, each yaml sets its shape and warmup
OPTIONS_SCHEDULE = {"constant": Schedule, "cosine": Schedule, "linear": Schedule}
#: conf/loss/<option>.yaml -> its declaration
OPTIONS_LOSS = {"cross_entropy": CrossEntropy, "label_smoothing": LabelSmoothing, "z_loss": ZLoss}
