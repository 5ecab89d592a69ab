"""One eval-mode forward over the sample batch, watched from inside, shared by the architecture checks: what
each block of a stack keeps of its input (Spans), attention weights and scales (Weights), and the logits with
the head pushed to certainty. Axes: b batch, time, d width."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from harness.checks.model.passes import computed_once, masked_loss, shared_train_pass, step_settings
from harness.checks.model.score_scale import Reading, ScoreScale
from harness.data.batch import to_device, training_mode
from harness.ops.forward_calls import SDPA_ARGS, Intercept, ModuleStack, call_argument
from harness.seeding import seed_all

SOFTMAXES = (torch.softmax, F.softmax, torch.Tensor.softmax)
#: the std of the random logits added to the head's output: a gap of thousands between the top logit and the
#: target's, far past what exp underflows at (float32 e^-104, float64 e^-745) and well inside float16's range
NOISE = 1000.0
#: attention weights are read for at most this many queries of each call (the last ones: they see the most keys)
QUERIES = 64


@dataclass
class Span:
    """One child of a candidate stack: the stream into its first call and out of its last (dropped once read),
    then what was read of them."""

    start: torch.Tensor | None = None
    end: torch.Tensor | None = None
    closed: bool = False
    kept: float | None = None  # <in, out> / <in, in>: the share of its input the output keeps
    cosine: float | None = None  # the mean over positions of cos(in, out)
    into: torch.Tensor | None = None
    out: torch.Tensor | None = None
    then: torch.Tensor | None = None  # the fingerprint of the input of the first call after the span


@dataclass
class Attention:
    """One module's attention weights, summed over the rows read (a row: one query of one head, 2+ keys)."""

    rows: int = 0
    excess: float = 0.0  # (top weight - 1/keys) / (1 - 1/keys): 0 uniform, 1 one-hot
    spread: float = 0.0  # the scores' std over the keys


@dataclass
class Inside:
    """What the watched forward showed."""

    stacks: dict[str, list[tuple[str, float, float]]] = field(
        default_factory=dict
    )  # stack: (block, kept, cos)
    attention: dict[str, Attention] = field(default_factory=dict)  # module ("forward": the model's own code)
    scales: dict[str, list[Reading]] = field(default_factory=dict)  # module: each attention call's scale
    head: str | None = None
    logits_nonfinite: float = 0.0  # the share of the returned logits' entries that are NaN or inf
    loss: float = math.nan


def _fingerprint(x: torch.Tensor) -> torch.Tensor:
    """A few numbers that tell two tensors apart (their sums and some strided entries), kept instead of them."""
    flat = x.detach().flatten().float()
    stride = max(1, flat.numel() // 61)
    return torch.cat([flat.sum().view(1), flat.square().sum().view(1), flat[::stride][:64]])


def _stream_tensor(value, b: int, time: int) -> torch.Tensor | None:
    """The first float [b, time, d] tensor in a call's arguments or output (tuples, lists, dicts searched)."""
    if isinstance(value, torch.Tensor):
        shaped = value.is_floating_point() and value.ndim == 3 and value.shape[:2] == (b, time)
        return value if shaped else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return next((t for t in (_stream_tensor(v, b, time) for v in value) if t is not None), None)
    return None


def _candidate_stacks(model: nn.Module) -> dict[str, list[str]]:
    """{module name: its children's names} for every module whose children are all numbered."""
    found = {}
    # `blocks.0`, `blocks.1`, ...; a child that is a container, never called, spans the calls of what it holds
    for name, module in model.named_modules():
        children = [child for child, _ in module.named_children()]
        if children and all(child.isdigit() for child in children):
            found[name] = [f"{name}.{child}" if name else child for child in children]
    return found


def _is_within(name: str, part: str) -> bool:
    """Whether module `name` is `part` or inside it."""
    return name == part or name.startswith(part + ".")


class Spans:
    """Forward hooks on every module following each candidate stack's children, which carry the stream ([b,
    time, d]) from one to the next."""

    def __init__(self, model: nn.Module, b: int, time: int):
        self.b, self.time = b, time
        self.stacks = _candidate_stacks(model)
        self.spans = {child: Span() for children in self.stacks.values() for child in children}
        names = [n for n, _ in model.named_modules()]
        self.parts = {n: [c for c in self.spans if _is_within(n, c)] for n in names}  # the spans a call is in
        self.open: dict[str, Span] = {}
        self.running: list[str] = []  # the modules whose forward is running, outermost first
        self.handles = [
            m.register_forward_pre_hook(self.pre(n), with_kwargs=True) for n, m in model.named_modules()
        ]
        self.handles += [
            m.register_forward_hook(self.post(n), with_kwargs=True) for n, m in model.named_modules()
        ]

    def pre(self, name: str):
        def hook(module, args, kwargs):
            x = _stream_tensor((args, kwargs), self.b, self.time)
            for child, span in list(self.open.items()):
                # the span has ended once a call outside it starts, but for one made from inside it
                outside = child not in self.parts[name] and not any(
                    _is_within(r, child) for r in self.running
                )
                if span.end is not None and outside:
                    self.close(child, x)
            self.running.append(name)
            for child in self.parts[name]:
                span = self.spans[child]
                if span.start is None and not span.closed and x is not None:
                    # a copy: a block may add to its input in place (x += f(x))
                    span.start, self.open[child] = x.detach().clone(), span

        return hook

    def post(self, name: str):
        def hook(module, args, kwargs, output):
            self.running.pop()
            y = _stream_tensor(output, self.b, self.time)
            for child in self.parts[name]:
                if child in self.open and y is not None and y.shape == self.spans[child].start.shape:
                    self.spans[child].end = y  # the last call of the span so far: replaced by any later one

        return hook

    def close(self, child: str, then: torch.Tensor | None) -> None:
        span = self.open.pop(child)
        x, y = span.start.detach().float(), span.end.detach().float()
        span.kept = ((x * y).sum() / (x * x).sum().clamp_min(1e-30)).item()
        span.cosine = F.cosine_similarity(x, y, dim=-1).mean().item()
        span.into, span.out = _fingerprint(x), _fingerprint(y)
        span.then = None if then is None else _fingerprint(then)
        span.start = span.end = None
        span.closed = True

    def remove(self) -> None:
        for child, span in list(self.open.items()):
            if span.end is not None:
                self.close(child, None)
        for handle in self.handles:
            handle.remove()

    def chained(self, children: list[str]) -> bool:
        """Every child read, and each one's output the next one's input (the last: the next call's)."""
        spans = [self.spans[c] for c in children]
        if not all(s.closed for s in spans):
            return False
        links = [(a.out, b.into) for a, b in zip(spans, spans[1:], strict=False)]
        links = links or [(spans[0].out, spans[0].then)]
        return all(b is not None and torch.equal(a, b) for a, b in links)

    def read(self, model: nn.Module, attended: set[str]) -> dict[str, list[tuple[str, float, float]]]:
        """{stack: [(block, kept, cos)]} for the chained stacks that no other chained stack holds."""
        chained = [name for name, children in self.stacks.items() if self.chained(children)]
        outer = [s for s in chained if not any(_is_within(s, c) for o in chained for c in self.stacks[o])]
        return {
            stack: [
                (child, self.spans[child].kept, self.spans[child].cosine)
                for child in self.stacks[stack]
                if _is_block(model, child, attended)
            ]
            for stack in outer
        }


def _is_block(model: nn.Module, name: str, attended: set[str]) -> bool:
    """Whether a child is meant to be a residual block: it normalizes and holds another weighted layer, or
    computes attention."""
    modules = list(model.get_submodule(name).modules())
    norm = any("norm" in type(m).__name__.lower() for m in modules)
    weighted = sum(1 for m in modules if next(m.parameters(recurse=False), None) is not None)
    return (norm and weighted >= 2) or any(_is_within(a, name) for a in attended)


class Weights:
    """The Intercept handlers reading attention weights (softmaxes over [..., time, time],
    scaled_dot_product_attention) in the module computing them, until the output head runs."""

    def __init__(self, stack: ModuleStack, time: int, found: Inside):
        self.stack, self.time, self.found = stack, time, found.attention
        self.scales, self.scale = found.scales, ScoreScale(time)
        self.reading = True

    def stop(self, module, args) -> None:
        self.reading = False  # a softmax after the output head is over the vocabulary, not over keys

    def softmax(self, func, args, kwargs):
        result = func(*args, **kwargs)
        x, dim = (args[0] if args else kwargs["input"]), call_argument(args, kwargs, 1, "dim")
        square = isinstance(x, torch.Tensor) and x.ndim >= 3 and x.shape[-1] == x.shape[-2] == self.time
        if self.reading and square and dim in (-1, x.ndim - 1):
            self.read_scale(self.scale.at_softmax(x))
            scores = x.detach()[..., -QUERIES:, :].float()
            allowed = scores > torch.finfo(x.dtype).min / 2  # masked keys: -inf, or the dtype's lowest value
            self.add(scores, result.detach()[..., -QUERIES:, :].float(), allowed)
        return result

    def attention(self, func, args, kwargs):
        result = func(*args, **kwargs)
        if self.reading:
            values = {**dict(zip(SDPA_ARGS, args, strict=False)), **kwargs}
            self.read_scale(self.scale.at_attention(values))
            self.add(*_sdpa_weights(values))
        return result

    def read_scale(self, reading: Reading | None) -> None:
        if reading is not None:
            self.scales.setdefault(self.stack.current or "forward", []).append(reading)

    def add(self, scores: torch.Tensor, weights: torch.Tensor, allowed: torch.Tensor) -> None:
        """Accumulates the rows (the last axis: keys) with 2 or more keys allowed."""
        allowed = allowed.expand_as(scores)
        keys = allowed.sum(dim=-1)
        rows = keys >= 2
        if not rows.any():
            return
        keys = keys.clamp_min(1).float()
        excess = (weights.amax(dim=-1) - 1 / keys) / (1 - 1 / keys).clamp_min(1e-6)
        mean = scores.where(allowed, 0).sum(dim=-1) / keys
        spread = ((scores - mean.unsqueeze(-1)).square().where(allowed, 0).sum(dim=-1) / keys).sqrt()
        name = self.stack.current or "forward"  # the model's own forward: no submodule can be named so
        entry = self.found.setdefault(name, Attention())
        entry.rows += int(rows.sum())
        entry.excess += excess[rows].sum().item()
        entry.spread += spread[rows].sum().item()


def _sdpa_weights(values: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, weights and allowed keys of a scaled_dot_product_attention call's last QUERIES queries, as it
    computes them."""
    query, key = values["query"].detach().float(), values["key"].detach().float()
    length = query.shape[-2]
    query = query[..., -QUERIES:, :]
    if query.ndim >= 3 and key.shape[-3] != query.shape[-3] and query.shape[-3] % key.shape[-3] == 0:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    scale = values.get("scale") or 1 / math.sqrt(query.shape[-1])
    scores = (query @ key.transpose(-2, -1)) * scale
    positions = torch.arange(length - query.shape[-2], length, device=scores.device)
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device)
    if values.get("is_causal"):
        allowed = torch.arange(scores.shape[-1], device=scores.device) <= positions.unsqueeze(-1)
    mask = values.get("attn_mask")
    if mask is not None:
        mask = mask[..., -query.shape[-2] :, :] if mask.shape[-2] == length else mask
        if mask.dtype == torch.bool:
            allowed = allowed & mask
        else:
            scores = scores + mask.float()
            allowed = allowed & (mask > torch.finfo(mask.dtype).min / 2)
    allowed = allowed.expand_as(scores)
    weights = scores.masked_fill(~allowed, -math.inf).softmax(dim=-1).nan_to_num()
    return scores, weights, allowed


def _add_confident_noise(module, args, output):
    """A forward hook: the output plus random logits of std NOISE (a fixed generator, not the global one)."""
    if not (isinstance(output, torch.Tensor) and output.is_floating_point()):
        return output
    noise = torch.randn(output.shape, generator=torch.Generator().manual_seed(0)) * NOISE
    return output + noise.to(output)


def _inside_pass(model: nn.Module, batch: dict, seed: int, loss_fn, head: str | None) -> Inside:
    """One seeded eval-mode forward of `batch`, watched: the stacks, the attention and its scales, and with
    the head (`head`) pushed to certainty, the logits and loss."""
    batch = to_device(batch, model)
    ids = batch["input_ids"]
    found = Inside(head=head)
    stack = ModuleStack(model)
    weights = Weights(stack, ids.shape[1], found)
    handlers = {
        **weights.scale.handlers,
        **dict.fromkeys(SOFTMAXES, weights.softmax),
        F.scaled_dot_product_attention: weights.attention,
    }
    handles = []
    if head is not None:
        handles.append(model.get_submodule(head).register_forward_pre_hook(weights.stop))
        handles.append(model.get_submodule(head).register_forward_hook(_add_confident_noise))
    spans = Spans(model, *ids.shape)
    seed_all(seed)
    try:
        with stack, Intercept(handlers), training_mode(model, training=False), torch.no_grad():
            logits = model(ids)
    finally:
        spans.remove()
        for handle in handles:
            handle.remove()
    found.stacks = spans.read(model, set(found.attention))
    if head is not None:
        found.logits_nonfinite = (~torch.isfinite(logits)).float().mean().item()
        found.loss = masked_loss(logits, batch, loss_fn).item()
    return found


def shared_inside_pass(model: nn.Module, batch: dict, cfg) -> Inside:
    seed, _, loss = step_settings(cfg)
    head = shared_train_pass(model, batch, seed, loss).head
    return computed_once(
        batch, ("inside", seed, repr(loss)), model, lambda: _inside_pass(model, batch, seed, loss, head)
    )
