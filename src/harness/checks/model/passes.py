"""The passes over a sample batch that several model checks share (computed_once): one seeded train-mode
forward and backward (TrainPass), a Runner that repeats a forward exactly, and bit checksums that catch a
forward changing its weights."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from harness.checks.result import brief_list
from harness.data.batch import to_device, training_mode
from harness.ops.loss import CrossEntropy, Loss, loss_of
from harness.seeding import seed_all


def masked_loss(logits: torch.Tensor, batch: dict, loss: Loss | None = None) -> torch.Tensor:
    """The run's loss (harness.ops.loss.loss_of(cfg); None: cross entropy) of `logits` on `batch`."""
    return (loss or CrossEntropy())(logits, batch["targets"], batch["loss_mask"])


def step_settings(cfg) -> tuple[int, float, Loss]:
    """The seed, learning rate and loss of the run: what a check's training pass and optimizer step need."""
    plain = cfg or {}
    return int(plain.get("seed", 0)), float((plain.get("optim", None) or {}).get("lr", 1e-3)), loss_of(cfg)


def computed_once(batch: dict, key: tuple, model: nn.Module, compute: Callable):
    """`compute()`, once per `key` and model for a SampleBatch, every time for a plain dict."""
    passes = getattr(batch, "passes", None)
    if passes is None:
        return compute()
    owner, value = passes.get(key, (None, None))
    if owner is None or owner() is not model:  # a model of the same id, after the first was freed: recompute
        value = compute()
        passes[key] = (weakref.ref(model), value)
    return value


@dataclass
class TrainPass:
    """What one seeded train-mode forward/backward over a batch found."""

    logits: torch.Tensor  # detached
    loss: torch.Tensor  # detached
    grads: dict[str, torch.Tensor | None]  # every trainable parameter's gradient (None: it got none)
    head: str | None  # the module that produced the logits: the last leaf module whose output has their shape
    changed: list[str] = field(default_factory=list)  # parameters the forward changed in place


def train_pass(model: nn.Module, batch: dict, seed: int, loss_fn: Loss | None = None) -> TrainPass:
    """Seed, then one forward and backward of `loss_fn` (None: cross entropy) in train mode, as a training
    step runs it; leaves no gradient."""
    batch = to_device(batch, model)
    shapes: list[tuple[str, torch.Size]] = []

    def record(name):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor):
                shapes.append((name, output.shape))

        return hook

    leaves = [(name, m) for name, m in model.named_modules() if name and not any(m.children())]
    handles = [m.register_forward_hook(record(name)) for name, m in leaves]
    model.zero_grad(set_to_none=True)
    before = checksums(model)
    seed_all(seed)
    try:
        with training_mode(model, training=True):
            logits = model(batch["input_ids"])
            changed = _changed_since(model, before)
            loss = masked_loss(logits, batch, loss_fn)
            try:
                loss.backward()
            except RuntimeError:  # autograd refuses a weight changed in place after its use: no gradients
                if not changed:
                    raise
    finally:
        for handle in handles:
            handle.remove()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    head = next((name for name, shape in reversed(shapes) if shape == logits.shape), None)
    return TrainPass(logits.detach(), loss.detach(), grads, head, changed)


def shared_train_pass(model: nn.Module, batch: dict, seed: int, loss_fn: Loss | None = None) -> TrainPass:
    key = ("train", seed, repr(loss_fn))
    return computed_once(batch, key, model, lambda: train_pass(model, batch, seed, loss_fn))


#: an integer type of each float type's width: a float tensor viewed as integers sums to a bit-level checksum
BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def checksum(x: torch.Tensor) -> int:
    """A checksum of `x`'s bits: any change of any element changes it (but for changes that cancel out)."""
    x = x.detach()
    bits = BITS.get(x.dtype)
    return int((x.contiguous().view(bits) if bits else x).sum(dtype=torch.int64))


def checksums(model: nn.Module) -> dict[str, int]:
    return {name: checksum(p) for name, p in model.named_parameters()}


def _changed_since(model: nn.Module, before: dict[str, int]) -> list[str]:
    """The parameters whose checksum differs from `before` (a checksums() of the same model)."""
    return [name for name, value in checksums(model).items() if value != before[name]]


class WeightsChanged(Exception):
    """A forward pass changed parameters in place: a check comparing two forward passes cannot judge."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(f"forward changed {brief_list(names)} in place")


class Runner:
    """Runs a model on input ids as training does (train mode, re-seeded each call), without autograd;
    WeightsChanged where a call changes a parameter."""

    def __init__(self, model: nn.Module, seed: int = 0):
        self.model, self.seed = model, seed
        self.before = checksums(model)

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        seed_all(self.seed)
        with training_mode(self.model, training=True), torch.no_grad():
            logits = self.model(input_ids)
        changed = _changed_since(self.model, self.before)
        if changed:
            raise WeightsChanged(changed)
        return logits.float()
