"""The loss, chosen by the `loss` config group: training, the checks, the probes and mode=eval take it from
`loss_of(cfg)`. Loss (a fork subclasses it), CrossEntropy (the default; its mean a twin), LabelSmoothing,
ZLoss. Axes: b batch, time positions, vocab classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from harness.errors import ConfigError
from harness.ops.twin import Twin


class MaskedCrossEntropy(Twin):
    """Mean of -log softmax(logits[b, t])[targets[b, t]] over the positions where loss_mask is true.

    logits: [b, time, vocab], targets: Long[b, time], loss_mask: Bool[b, time] -> scalar"""

    test_shapes = (
        {"b": 1, "time": 1, "vocab": 2},
        {"b": 2, "time": 5, "vocab": 7},
        {"b": 4, "time": 16, "vocab": 20},
        {"b": 3, "time": 9, "vocab": 100},
    )
    bench_shape = {"b": 32, "time": 32, "vocab": 103}  # data=text defaults, full mode

    def loop(self, logits, targets, loss_mask):
        terms = []
        for i in range(logits.shape[0]):
            for t in range(logits.shape[1]):
                if loss_mask[i, t]:
                    terms.append(-torch.log_softmax(_at_least_float32(logits[i, t]), dim=0)[targets[i, t]])
        return torch.stack(terms).mean()

    def vectorized(self, logits, targets, loss_mask):
        per_position = cross_entropy(logits, targets, loss_mask)
        mask = rearrange(loss_mask, "b time -> (b time)").to(per_position.dtype)
        return (rearrange(per_position, "b time -> (b time)") * mask).sum() / mask.sum()

    @classmethod
    def example_inputs(cls, generator, b, time, vocab):
        logits = torch.randn(b, time, vocab, generator=generator) * 3
        targets = torch.randint(0, vocab, (b, time), generator=generator)
        loss_mask = torch.rand(b, time, generator=generator) < 0.6
        loss_mask[0, -1] = True  # at least one position counts
        return logits, targets, loss_mask


# bf16 logits' log-probabilities lose the small differences training lives on: every built-in loss widens them
def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """`logits` in float32 where they are in a lower precision (bf16, fp16), else as they are (float64 stays)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Float[b, time]: -log p(target) at every position, in float32 at least whatever the logits' dtype; a
    target outside the mask (-100, a pad id past the vocabulary) is never read."""
    safe = torch.where(loss_mask, targets, torch.zeros_like(targets))
    flat = F.cross_entropy(
        rearrange(_at_least_float32(logits), "b time vocab -> (b time) vocab"),
        rearrange(safe, "b time -> (b time)"),
        reduction="none",
    )
    return rearrange(flat, "(b time) -> b time", b=logits.shape[0])


class Loss:
    """The training objective over a Batch's masked positions: the mean of `per_position` over the loss mask
    (docs/contracts.md, Loss). `vectorize`: false runs the harness's own twins' loops."""

    def __init__(self, vectorize: bool = True):
        self.vectorize = vectorize

    def nll(self, logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
        """Float[b, time]: -log p(target) alone, whatever the objective adds: what perplexity and bits are
        made of."""
        return cross_entropy(logits, targets, loss_mask)

    def per_position(
        self, logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """Float[b, time]: the objective at every position (read only inside the mask)."""
        return self.nll(logits, targets, loss_mask)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
        """The loss: the mean of per_position over the masked positions (a scalar, float32 at least)."""
        # in training a micro-batch's mean, which harness.train.step_loss weighs by its masked positions
        per_position = self.per_position(logits, targets, loss_mask)
        mask = loss_mask.to(torch.promote_types(per_position.dtype, torch.float32))
        return (per_position * mask).sum() / mask.sum()

    def per_example(
        self, logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """Float[b]: each example's loss (the mean over its own masked positions; 0 where it has none)."""
        per_position = self.per_position(logits, targets, loss_mask)
        mask = loss_mask.to(torch.promote_types(per_position.dtype, torch.float32))
        return (per_position * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CrossEntropy(Loss):
    """The masked mean of -log p(target), every task's default; its mean is the MaskedCrossEntropy twin."""

    def __init__(self, vectorize: bool = True):
        super().__init__(vectorize)
        self.twin = MaskedCrossEntropy(vectorize)

    def __call__(self, logits, targets, loss_mask):
        return self.twin(logits, targets, loss_mask)


class LabelSmoothing(Loss):
    """Cross entropy against a target keeping 1 - `smoothing` on the right class and spreading `smoothing`
    over every class: (1 - s) * nll + s * (log-sum-exp - mean logit)."""

    def __init__(self, smoothing: float = 0.1, vectorize: bool = True):
        super().__init__(vectorize)
        if not 0 <= smoothing < 1:
            raise ConfigError(
                "loss.smoothing", smoothing, "the share spread over every class lies in [0, 1) (try 0.1)"
            )
        self.smoothing = smoothing

    def per_position(self, logits, targets, loss_mask):
        logits = _at_least_float32(logits)
        # ~ln(vocab) at init, as the cross entropy; a memorized example's loss stays above 0 (more with s)
        uniform = logits.logsumexp(dim=-1) - logits.mean(dim=-1)
        return (1 - self.smoothing) * self.nll(logits, targets, loss_mask) + self.smoothing * uniform


class ZLoss(Loss):
    """Cross entropy plus `weight` x log-sum-exp(logits)²: a pull of the normalizer towards 0 that keeps the
    logits from drifting large (PaLM's z-loss, weight 1e-4)."""

    def __init__(self, weight: float = 1e-4, vectorize: bool = True):
        super().__init__(vectorize)
        if not weight >= 0:
            raise ConfigError("loss.weight", weight, "the z-loss's weight must be >= 0 (try 1e-4)")
        self.weight = weight

    def per_position(self, logits, targets, loss_mask):
        return (
            self.nll(logits, targets, loss_mask)
            + self.weight * _at_least_float32(logits).logsumexp(dim=-1).square()
        )


def own_reduction(loss) -> bool:
    """Whether `loss` computes its value its own way (a `__call__` of a fork's), not as the mean of per_position
    over the mask that the harness's losses take."""
    return type(loss).__call__ not in (Loss.__call__, CrossEntropy.__call__)


def loss_of(cfg) -> Loss:
    """The loss the config's `loss` node names, with `vectorize` from model.vectorize where its class takes
    it; CrossEntropy where the config names none (a plain dict, or none)."""
    from omegaconf import OmegaConf

    from harness.config.build import build, takes

    cfg = OmegaConf.create(cfg or {}) if not OmegaConf.is_config(cfg) else cfg
    vectorize = bool(OmegaConf.select(cfg, "model.vectorize", default=True))
    node = cfg.get("loss")
    if node is None:
        return CrossEntropy(vectorize)
    extra = {"vectorize": vectorize} if "vectorize" not in node and takes(node, "vectorize") else {}
    return build(node, "loss", **extra)
