"""The factor attention applies to q·kᵀ before its softmax, read from what the code computes (ScoreScale):
factors carried by scaled tensors into products square over the positions, fitted at the softmax. Axes: b
batch, time positions, d head width."""

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
#: a sum or difference keeps a factor its two tensors share (not one with a number: q + 1 is no scaled q)
SUMS = (
    torch.add,
    torch.Tensor.add,
    torch.Tensor.__add__,
    torch.Tensor.__radd__,
    torch.sub,
    torch.Tensor.sub,
    torch.Tensor.__sub__,
)
#: elementwise arithmetic that keeps a factor its tensor operands share (a sum, a negation, a joined tensor)
KEEPING = (
    *SUMS,
    torch.neg,
    torch.Tensor.neg,
    torch.Tensor.__neg__,
    torch.cat,
    torch.stack,
    torch.Tensor.contiguous,
    torch.Tensor.clone,
    torch.Tensor.to,
    torch.Tensor.float,
    torch.Tensor.type_as,
)
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
#: products kept for the softmax that follows them: an attention's own product is the latest of its shape
KEPT = 4
#: rows (queries) of a product kept and fitted: the last ones, which see the most keys
QUERIES = 64
#: operands whose rows' lengths vary by less than this share of their mean have a constant length: their scale
#: is a temperature, not the 1/sqrt(d) that keeps a dot product of d unit-variance entries at unit variance
CONSTANT = 1e-3


@dataclass
class Reading:
    """One attention call's scale: the factor applied to q·kᵀ, the head's width, and whether q and k are of
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
    scores: torch.Tensor  # a copy of its last QUERIES rows: scaling the scores in place changes no reading
    factor: float
    width: int
    normalized: bool


def _storage_region(x: torch.Tensor) -> tuple:
    """Which elements of which storage `x` views, whatever their order (a transpose views the same ones)."""
    return (
        x.untyped_storage().data_ptr(),
        x.storage_offset(),
        frozenset(zip(x.shape, x.stride(), strict=True)),
    )


def _tensor_arguments(args, kwargs) -> list[torch.Tensor]:
    """The tensor arguments of a call, those in a list or tuple (cat, stack) included."""
    found = []
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor):
                found.append(item)
    return found


def _product_operands(func, args: tuple, kwargs: dict) -> tuple:
    """A product's two operands (q and kᵀ; q and k for einsum), the axis of the second over the keys' width,
    and the product's own factor (baddbmm's alpha)."""
    if func is torch.einsum:
        given = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
        return (*(list(given) + [None, None])[:2], -1, 1.0)  # "...id,...jd->...ij": k is [..., j, d]
    names = ("input", "other")
    if func in (torch.bmm, torch.Tensor.bmm):
        names = ("input", "mat2")
    if func in (torch.baddbmm, torch.Tensor.baddbmm):
        names = ("input", "batch1", "batch2")
    values = {**dict(zip(names, args, strict=False)), **kwargs}
    if len(names) == 3:
        return values.get("batch1"), values.get("batch2"), -2, float(values.get("alpha", 1.0))
    return values.get(names[0]), values.get(names[1]), -2, 1.0  # q @ kᵀ: kᵀ is [..., d, j]


def _constant_length(x: torch.Tensor, axis: int) -> bool:
    """Whether every vector of `x` along `axis` has (nearly) the same length."""
    lengths = torch.linalg.vector_norm(x.detach().float(), dim=axis)
    return bool(lengths.numel() > 1 and lengths.std() <= CONSTANT * lengths.mean().clamp_min(1e-30))


def _fitted_factor(scores: torch.Tensor, product: torch.Tensor) -> float | None:
    """The factor c of scores = c * product + (a term alike for every example), fitted on their differences
    between examples where finite; None where nothing is left (one example)."""
    x, p = scores.detach().float(), product.detach().float()
    if x.ndim < 3 or x.shape[0] < 2:
        return None
    dx, dp = x[1:] - x[:1], p[1:] - p[:1]
    valid = torch.isfinite(dx) & torch.isfinite(dp) & (x[1:] != x[:1])
    dx, dp = dx.where(valid, 0), dp.where(valid, 0)
    denominator = (dp * dp).sum()
    return (dx * dp).sum().item() / denominator.item() if denominator > 0 else None


class ScoreScale:
    """Intercept handlers (`handlers`) that follow one forward's factors and products; `at_softmax` and
    `at_attention` read an attention call's scale."""

    def __init__(self, time: int):
        self.time = time
        self.factors: dict[int, tuple[weakref.ref, float]] = {}  # id of a tensor -> (the tensor, its factor)
        self.regions: dict[
            tuple, tuple[weakref.ref, float]
        ] = {}  # elements scaled in place -> (a view, factor)
        self.products: list[Product] = []

    @property
    def handlers(self) -> dict:
        return {
            **dict.fromkeys(MULTIPLY + DIVIDE, self.scaling),
            **dict.fromkeys(KEEPING, self.keeping),
            **dict.fromkeys(PRODUCTS, self.product),
        }

    def factor_of(self, x) -> float:
        """The factor tensor `x` carries: its own, its base's (a view: k.transpose(-2, -1), a slice), or that
        of the elements it views scaled in place; 1 where none is known."""
        if not isinstance(x, torch.Tensor):
            return 1.0
        for key, table in (
            (id(x), self.factors),
            (id(x._base), self.factors),
            (_storage_region(x), self.regions),
        ):
            ref, factor = table.get(key, (None, 1.0))
            held = None if ref is None else ref()
            if held is not None and (table is self.regions or held is x or held is x._base):
                return factor
        return 1.0

    def carry(self, tensor: torch.Tensor, factor: float, in_place: bool = False) -> None:
        if factor == 1.0 and not in_place:
            return
        if in_place and tensor._base is not None:  # a view of a fused tensor (q of qkv): its elements only
            self.regions[_storage_region(tensor)] = (weakref.ref(tensor), factor)
        else:
            self.factors[id(tensor)] = (weakref.ref(tensor), factor)

    def scaling(self, func, args, kwargs):
        # `q * scale`, `k / math.sqrt(d)`, in place too: the tensor carries the factor
        result = func(*args, **kwargs)
        a = args[0] if args else kwargs.get("input")
        b = args[1] if len(args) > 1 else kwargs.get("other")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel() > 1 and b.numel() > 1:
            if func not in DIVIDE and isinstance(result, torch.Tensor):  # cos * q: the factors multiply
                self.carry(result, self.factor_of(a) * self.factor_of(b), func in IN_PLACE)
            return result
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
        if plain and tensor.is_floating_point() and kwargs.get("rounding_mode") is None:
            factor = self.factor_of(tensor) * (1 / number if divide else number)
            self.carry(tensor if func in IN_PLACE else result, factor, func in IN_PLACE)
        return result

    def keeping(self, func, args, kwargs):
        """A sum, negation, join or copy: the result keeps a factor every tensor operand shares."""
        result = func(*args, **kwargs)
        if func in SUMS and not all(isinstance(v, torch.Tensor) and v.numel() > 1 for v in (*args, None)[:2]):
            return result
        if isinstance(result, torch.Tensor) and result.is_floating_point():
            factors = {self.factor_of(t) for t in _tensor_arguments(args, kwargs) if t.numel() > 1}
            if len(factors) == 1:
                self.carry(result, factors.pop())
        return result

    def product(self, func, args, kwargs):
        # a product square over the positions ([..., time, time]: q @ kᵀ, matmul, bmm, baddbmm, einsum): its
        # operands' factors and inner width d, kept for its last QUERIES rows until its softmax reads them
        result = func(*args, **kwargs)
        square = (
            isinstance(result, torch.Tensor)
            and result.is_floating_point()
            and result.ndim >= 3
            and result.shape[-1] == result.shape[-2] == self.time
        )
        if not square:
            return result
        q, k, key_axis, alpha = _product_operands(func, args, kwargs)
        if not all(isinstance(x, torch.Tensor) and x.ndim >= 2 for x in (q, k)):
            return result
        normalized = _constant_length(q, -1) and _constant_length(k, key_axis)
        factor = self.factor_of(q) * self.factor_of(k) * alpha
        kept = Product(result.detach()[..., -QUERIES:, :].clone(), factor, q.shape[-1], normalized)
        self.products = [*self.products[-(KEPT - 1) :], kept]
        return result

    def at_softmax(self, scores: torch.Tensor) -> Reading | None:
        """The scale of the softmax over `scores`, against the latest product of their shape (then let go);
        None where none is, or nothing can be fitted."""
        rows = scores.detach()[..., -QUERIES:, :]
        # fitted on the differences between examples: what is added alike to every one cancels (a causal mask
        # filled with -inf or -1e9, an ALiBi bias)
        match = next((p for p in reversed(self.products) if p.scores.shape == rows.shape), None)
        if match is None:
            return None
        self.products = [p for p in self.products if p is not match]
        factor = _fitted_factor(rows, match.scores)
        return None if factor is None else Reading(factor * match.factor, match.width, match.normalized)

    def at_attention(self, values: dict) -> Reading:
        """The scale of a scaled_dot_product_attention call (its arguments by name)."""
        query, key = values["query"], values["key"]
        width = query.shape[-1]
        scale = values.get("scale") or 1 / math.sqrt(width)
        normalized = _constant_length(query, -1) and _constant_length(key, -1)
        return Reading(scale * self.factor_of(query) * self.factor_of(key), width, normalized)


def declared_scale(model: torch.nn.Module, name: str) -> float | None:
    """The `attention_scale` a module declares (docs/contracts.md): the attention module's own, else the
    nearest enclosing one's, else None."""
    parts = name.split(".") if name and name != "forward" else []
    for end in range(len(parts), -1, -1):
        module = model.get_submodule(".".join(parts[:end])) if end else model
        value = getattr(module, "attention_scale", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None
