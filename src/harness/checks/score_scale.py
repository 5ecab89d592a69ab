"""The factor attention applies to q·kᵀ before its softmax, read from what the code computes in one watched forward
(harness.checks.watched_forward runs it; attention_scale in architecture.py judges it).

Three kinds of torch calls are followed, by the Intercept of that forward:

- a tensor multiplied or divided by a number (`q * scale`, `k / math.sqrt(d)`, in place too): the factor is
  kept for the tensor's storage, so that a view of it (`k.transpose(-2, -1)`) carries it into a product;
- a product whose result is square over the positions ([..., time, time]: `q @ kᵀ`, matmul, bmm, baddbmm's
  alpha, einsum): its operands' factors and their inner width d (the head's width);
- at the softmax over such scores: the factor between the scores it is given and the product, fitted on the
  differences between the batch's examples, where an additive mask or position bias (causal -inf, ALiBi),
  the same for every example, cancels. scaled_dot_product_attention states its factor: `scale`, or 1/sqrt(d).

Queries and keys of constant length (l2-normalized, as QK-norm makes them) are noted: their scale is a
temperature, not the 1/sqrt(d) that keeps a dot product of d unit-variance entries at unit variance.

Axes: b batch, time positions (queries and keys), d the head's width."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

#: a number times a tensor, or a tensor over a number: the factor is the number, or its inverse
MULTIPLY = (torch.mul, torch.Tensor.mul, torch.Tensor.mul_, torch.Tensor.__mul__, torch.Tensor.__rmul__)
DIVIDE = (
    torch.div,
    torch.true_divide,
    torch.Tensor.div,
    torch.Tensor.div_,
    torch.Tensor.true_divide,
    torch.Tensor.__truediv__,
)
IN_PLACE = (torch.Tensor.mul_, torch.Tensor.div_)
PRODUCTS = (
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.bmm,
    torch.Tensor.bmm,
    torch.baddbmm,
    torch.Tensor.baddbmm,
    torch.einsum,
)
#: the products kept for the softmax that follows them: an attention's own product is the latest of its shape
KEPT = 8
#: operands whose rows' lengths vary by less than this share of their mean have a constant length
CONSTANT = 1e-3


@dataclass
class Reading:
    """One attention call's scale: the factor applied to q·kᵀ, the head's width, whether q and k are of
    constant length (then the factor is a temperature)."""

    factor: float
    width: int
    normalized: bool

    @property
    def ratio(self) -> float:
        """The factor over 1/sqrt(width): 1 for the usual scale, sqrt(width) unscaled, width when multiplied."""
        return self.factor * math.sqrt(self.width)


@dataclass
class Product:
    scores: torch.Tensor
    factor: float
    width: int
    normalized: bool


def storage(x: torch.Tensor) -> int:
    return x.untyped_storage().data_ptr()


def operands(func, args: tuple, kwargs: dict) -> tuple:
    """A product's two operands (q and kᵀ, or q and k for einsum) and the factor it applies itself (baddbmm's
    alpha), from its arguments however they are given."""
    if func is torch.einsum:
        given = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
        return (*(list(given) + [None, None])[:2], 1.0)
    names = (
        ("input", "batch1", "batch2") if func in (torch.baddbmm, torch.Tensor.baddbmm) else ("input", "other")
    )
    if func in (torch.bmm, torch.Tensor.bmm):
        names = ("input", "mat2")
    values = {**dict(zip(names, args, strict=False)), **kwargs}
    if len(names) == 3:
        return values.get("batch1"), values.get("batch2"), float(values.get("alpha", 1.0))
    return values.get(names[0]), values.get(names[1]), 1.0


def constant_length(x: torch.Tensor, axis: int) -> bool:
    """Whether every vector of `x` along `axis` has (nearly) the same length."""
    lengths = torch.linalg.vector_norm(x.detach().float(), dim=axis)
    return bool(lengths.numel() > 1 and lengths.std() <= CONSTANT * lengths.mean().clamp_min(1e-30))


def fitted(scores: torch.Tensor, product: torch.Tensor) -> float | None:
    """The factor c of scores = c * product + (a term the same for every example), where both are finite and the
    scores not masked; None where nothing is left to fit."""
    x, p = scores.detach().float(), product.detach().float()
    valid = torch.isfinite(x) & torch.isfinite(p) & (x > torch.finfo(scores.dtype).min / 2)
    if x.ndim >= 3 and x.shape[0] >= 2:  # across examples: what is added for every one of them cancels
        x, p, valid = x[1:] - x[:1], p[1:] - p[:1], valid[1:] & valid[:1]
    x, p = x.where(valid, 0), p.where(valid, 0)
    denominator = (p * p).sum()
    return (x * p).sum().item() / denominator.item() if denominator > 0 else None


class ScoreScale:
    """Intercept handlers (`handlers`) that follow the factors and products of one forward; `at_softmax` and
    `at_attention` read an attention call's scale."""

    def __init__(self, time: int):
        self.time = time
        self.factors: dict[int, tuple[weakref.ref, float]] = {}  # a storage -> (a tensor on it, its factor)
        self.products: list[Product] = []

    @property
    def handlers(self) -> dict:
        return {
            **dict.fromkeys(MULTIPLY + DIVIDE, self.scaling),
            **dict.fromkeys(PRODUCTS, self.product),
        }

    def factor_of(self, x) -> float:
        """The factor the tensor `x` (or the tensor it is a view of) was scaled by; 1 where none is known."""
        if not isinstance(x, torch.Tensor):
            return 1.0
        ref, factor = self.factors.get(storage(x), (None, 1.0))
        return factor if ref is not None and ref() is not None else 1.0  # alive: its storage was not reused

    def scaling(self, func, args, kwargs):
        result = func(*args, **kwargs)
        a = args[0] if args else kwargs.get("input")
        b = args[1] if len(args) > 1 else kwargs.get("other")
        divide = func in DIVIDE
        if isinstance(a, torch.Tensor) and a.ndim >= 3:
            tensor, number = a, b
        elif not divide and isinstance(b, torch.Tensor) and b.ndim >= 3:  # a number times a tensor
            tensor, number = b, a
        else:  # a number over a tensor is no scaling of it
            return result
        if isinstance(number, torch.Tensor) and number.numel() == 1:
            number = number.item()
        plain = isinstance(number, (int, float)) and not isinstance(number, bool) and number != 0
        if not (plain and tensor.is_floating_point() and kwargs.get("rounding_mode") is None):
            return result
        factor = self.factor_of(tensor) * (1 / number if divide else number)
        target = tensor if func in IN_PLACE else result
        self.factors[storage(target)] = (weakref.ref(target), factor)
        return result

    def product(self, func, args, kwargs):
        result = func(*args, **kwargs)
        square = (
            isinstance(result, torch.Tensor)
            and result.is_floating_point()
            and result.ndim >= 3
            and result.shape[-1] == result.shape[-2] == self.time
        )
        if not square:
            return result
        q, k, alpha = operands(func, args, kwargs)
        if not all(isinstance(x, torch.Tensor) and x.ndim >= 2 for x in (q, k)):
            return result
        width = q.shape[-1]
        key_axis = -2 if k.shape[-2] == width and k.shape[-1] == self.time else -1
        normalized = constant_length(q, -1) and constant_length(k, key_axis)
        factor = self.factor_of(q) * self.factor_of(k) * alpha
        self.products = [*self.products[-(KEPT - 1) :], Product(result.detach(), factor, width, normalized)]
        return result

    def at_softmax(self, scores: torch.Tensor) -> Reading | None:
        """The scale of the softmax over `scores`, from the latest product of their shape; None where none is."""
        match = next((p for p in reversed(self.products) if p.scores.shape == scores.shape), None)
        factor = None if match is None else fitted(scores, match.scores)
        if factor is None:
            return None
        return Reading(factor * match.factor, match.width, match.normalized)

    def at_attention(self, values: dict) -> Reading:
        """The scale of a scaled_dot_product_attention call (its arguments by name)."""
        query, key = values["query"], values["key"]
        width = query.shape[-1]
        scale = values.get("scale") or 1 / math.sqrt(width)
        normalized = constant_length(query, -1) and constant_length(key, -1)
        return Reading(scale * self.factor_of(query) * self.factor_of(key), width, normalized)


def declared_scale(model: torch.nn.Module, name: str) -> float | None:
    """The `attention_scale` a module declares (the factor its attention means to apply to q·kᵀ, where that is
    not 1/sqrt(head_dim)): the module computing the attention's, else the nearest enclosing one's, else None."""
    parts = name.split(".") if name and name != "forward" else []
    for end in range(len(parts), -1, -1):
        module = model.get_submodule(".".join(parts[:end])) if end else model
        value = getattr(module, "attention_scale", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
