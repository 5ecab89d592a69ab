"""The `precision` row: one forward and the run's loss in the precision the Trainer set up, read op by op:
most multiply-adds in the dtype asked for, and the logits read below float32 only by casts. Axes: b batch, h
heads, m n k a product's sides, q s queries and keys, d width."""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from harness.checks.result import FAIL, PASS, SKIP, CheckResult
from harness.compat import dispatch_mode
from harness.ops.forward_calls import ModuleStack

#: trainer.precision (as Lightning names it) -> the dtype its matrix products run in
TRAINER = {
    "64-true": torch.float64,
    "32-true": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
}
#: trainer=fsdp's trainer.strategy.mixed_precision -> the dtype FSDP gathers the weights in and computes in
FSDP = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: the products whose dtype is the compute precision: (the operand whose dtype it is, its multiply-adds)
PRODUCTS = {
    torch.ops.aten.mm: (0, lambda a, b, *_: a.shape[0] * a.shape[1] * b.shape[1]),
    torch.ops.aten.addmm: (1, lambda c, a, b, *_: a.shape[0] * a.shape[1] * b.shape[1]),
    torch.ops.aten.bmm: (0, lambda a, b, *_: a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]),
    torch.ops.aten.baddbmm: (1, lambda c, a, b, *_: a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]),
    torch.ops.aten.convolution: (
        0,
        lambda x, w, *_: x.shape[0] * math.prod(w.shape) * math.prod(x.shape[2:]),
    ),
}
#: attention kernels (query first): two products, q·kᵀ and the weights·v, 2 x b h q s d multiply-adds
ATTENTION = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
)
#: what may read the logits in a lower precision in the loss: casts and views, which compute nothing
CASTS = {
    "_to_copy",
    "to",
    "view",
    "_unsafe_view",
    "reshape",
    "alias",
    "detach",
    "t",
    "transpose",
    "permute",
    "slice",
    "select",
    "expand",
    "clone",
    "contiguous",
    "as_strided",
    "unsqueeze",
    "squeeze",
    "copy_",
    "lift_fresh",
}
#: below this share of the multiply-adds in the dtype asked for, the forward does not compute in it
SHARE = 0.5


def asked_dtype(trainer) -> tuple[torch.dtype | None, str]:
    """The dtype the run's matrix products should run in and the setting that asks for it (None: a precision
    this check does not know, e.g. transformer-engine)."""
    policy = getattr(trainer.strategy, "mixed_precision", None)
    if isinstance(policy, str) and policy in FSDP:
        return FSDP[policy], f"trainer.strategy.mixed_precision={policy}"
    precision = str(trainer.precision)
    return TRAINER.get(precision), f"trainer.precision={precision}"


#: recurrent kernels (input first, then the weights, some in lists): input x gate rows multiply-adds, about
RECURRENT = (
    "mkldnn_rnn_layer",
    "_cudnn_rnn",
    "miopen_rnn",
    "lstm",
    "gru",
    "rnn_tanh",
    "rnn_relu",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
)


def _gate_rows(args) -> int:
    """The most rows of a weight matrix among `args` (and the lists in them): a recurrent kernel's gates."""
    found = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2]
    found += [
        t
        for a in args
        if isinstance(a, (list, tuple))
        for t in a
        if isinstance(t, torch.Tensor) and t.dim() == 2
    ]
    return max((t.shape[0] for t in found), default=1)


def _product_work(func, args) -> tuple[torch.dtype, int] | None:
    """(dtype, multiply-adds) of one matrix product (`func`, an aten overload, on `args`); None for any other
    op."""
    packet = func.overloadpacket
    if packet in PRODUCTS:
        operand, work = PRODUCTS[packet]
        return args[operand].dtype, int(work(*args))
    if packet.__name__ in ATTENTION:
        q, k = args[0], args[1]
        return q.dtype, 2 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
    if packet.__name__ in RECURRENT and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
        return args[0].dtype, args[0].numel() * _gate_rows(args[1:])
    return None


class Ops(dispatch_mode()):
    """While active: each product's (dtype, work, module) in `products`; once `loss` is set, each op but a
    cast reading low-precision logits, in `low`."""

    def __init__(self, stack: ModuleStack, logits_shape: tuple | None = None):
        super().__init__()
        self.stack, self.logits_shape = stack, logits_shape
        self.products: list[tuple[torch.dtype, int, str]] = []
        self.loss, self.low = False, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__
        if self.loss and op not in CASTS:
            low = [
                t
                for t in args
                if isinstance(t, torch.Tensor)
                and t.is_floating_point()
                and t.element_size() < 4
                and t.shape[-1:] == self.logits_shape[-1:]
            ]
            if low:
                self.low.append((op, tuple(low[0].shape), low[0].dtype))
        elif not self.loss and (found := _product_work(func, args)) is not None:
            self.products.append((*found, self.stack.current or "the model's own forward"))
        return func(*args, **kwargs)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _read_forward(model, batch: dict, loss, context) -> tuple[list, list, torch.Tensor]:
    """(products, low-precision reads in the loss, the loss value) of one no-grad forward and loss inside
    `context`, the Trainer's precision context."""
    with ModuleStack(model) as stack, torch.no_grad(), context:
        ops = Ops(stack)
        with ops:
            logits = model(batch["input_ids"])
        ops.logits_shape, ops.loss = tuple(logits.shape), True
        with ops:
            value = loss(logits, batch["targets"], batch["loss_mask"])
    return ops.products, ops.low, value


def precision(model, batch: dict, loss, context, dtype: torch.dtype | None, setting: str) -> CheckResult:
    """The `precision` row: the forward's products in `dtype` (what `setting` asks), the loss in float32."""
    if dtype is None:
        return CheckResult(
            "precision", SKIP, f"not judged: {setting} is a precision this check does not know"
        )
    products, low, value = _read_forward(model, batch, loss, context)
    if not products:
        return CheckResult("precision", SKIP, "not judged: one forward ran no matrix product to read")
    by_dtype: dict[torch.dtype, int] = defaultdict(int)
    for kind, done, _ in products:
        by_dtype[kind] += done
    total = sum(by_dtype.values())
    share = by_dtype.get(dtype, 0) / total
    other = sorted((k for k in by_dtype if k != dtype), key=lambda k: -by_dtype[k])
    if share < SHARE:
        where = list(dict.fromkeys(module for kind, _, module in products if kind != dtype))  # in order
        return CheckResult(
            "precision",
            FAIL,
            f"{setting} asks for {_dtype_name(dtype)} matrix products, but {1 - share:.0%} of one forward's multiply-adds "
            f"ran in {_dtype_name(other[0])} (in {', '.join(where[:3])}{', ...' if len(where) > 3 else ''}): the forward "
            "turns autocast off (torch.autocast(..., enabled=False)) or casts itself (.float(), .to(dtype)); leave "
            "the precision to the Trainer",
        )
    if low or value.element_size() < 4:
        op, shape, kind = low[0] if low else ("the loss's value", tuple(value.shape), value.dtype)
        return CheckResult(
            "precision",
            FAIL,
            f"the loss is computed on {_dtype_name(kind)} logits ({op} of a {list(shape)} tensor in {_dtype_name(kind)}): cast "
            "the logits to float32 before the loss (logits.float()), as the built-in losses do",
        )
    rest = f"; {1 - share:.0%} in {', '.join(map(_dtype_name, other))}" if other else ""
    return CheckResult(
        "precision",
        PASS,
        f"{setting}: {share:.0%} of one forward's multiply-adds ran in {_dtype_name(dtype)} ({len(products)} matrix "
        f"products{rest}), the loss in {_dtype_name(value.dtype)}",
    )
