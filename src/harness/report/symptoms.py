"""Symptoms, training problems seen while the run trains (verdict.json's `symptoms`, docs/contracts.md): the
`Symptom` record, each name's suggested fix (SUGGESTIONS), `nonfinite`, and `judge`, the SYMPTOM rule."""

# here, not in the probes: the record and the rule work the same whether or not a fork keeps the probes

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: every symptom's name -> the fix it suggests when the detector has nothing more specific to say
SUGGESTIONS = {
    "vanishing_gradients": "the earliest layers barely learn: add residual connections or normalization, "
    "use a gated cell (model=lstm) or attention for long sequences, or shorten data.length",
    "exploding_gradients": "lower the learning rate (optim.lr), clip gradients (trainer.gradient_clip_val=1.0), "
    "or check the init scale",
    "dead_units": "a ReLU-like layer outputs exactly zero: lower the learning rate, check its bias and init, "
    "or use a leaky activation (GELU, LeakyReLU)",
    "saturated_activations": "a tanh/sigmoid layer sits at its limits, where its gradient is ~0: scale its "
    "inputs down (init, normalization before it) or lower the learning rate",
    "loss_spike": "lower the learning rate (optim.lr), add warmup (schedule=cosine schedule.warmup_steps=...), or clip "
    "gradients (trainer.gradient_clip_val=1.0)",
    "divergence": "the loss climbs and stays up: lower the learning rate (optim.lr) several times over, add or "
    "lengthen warmup (schedule=cosine schedule.warmup_steps=...), or clip gradients (trainer.gradient_clip_val=1.0)",
    "no_progress": "the loss is where it started: raise the learning rate (optim.lr), check that the "
    "parameters are trainable and that the loss is not detached from them",
    "update_ratio": "the optimizer's steps are the wrong size for the weights: change the learning rate "
    "(optim.lr) by the factor the ratio is off from ~1e-3",
    "nonfinite": "find where it first appears (`where`); lower the learning rate, clip gradients, or run "
    "debug=anomaly to see the operation",
    "dead_params": "the parameter gets no gradient: it is unused in forward, frozen, or cut off from the loss "
    "(a .detach(), an integer cast, a branch never taken)",
    "data_wait": "the steps wait on the training loader: give it worker processes (data.num_workers=4, or one a "
    "core the run leaves free), pin_memory=True in its DataLoader on a GPU, and move decoding and tokenizing out of "
    "__getitem__ into `python -m harness.cli.prepare` (data=corpus then reads ready token shards)",
    "ranks_diverged": "every rank must apply the same update: make every parameter in the model's __init__, before "
    "the strategy wraps or shards it (one added or replaced later gets no averaged gradient); change weights or "
    "optimizer state on every rank alike, never on one; resume every rank from the same checkpoint",
    "host_sync": "keep the value on the device (a mask or torch.where instead of an if, a sum kept as a tensor), read "
    "it on logging steps only, and make constant tensors once (a buffer in __init__), not torch.tensor(..., device=) "
    "every step",
    "recompiles": "make what the failed guard reads the same every call: mark a changing dimension dynamic "
    "(torch._dynamo.mark_dynamic), keep Python values that change out of forward (or in a tensor), build objects "
    "forward reads once; raising torch._dynamo.config.recompile_limit only hides it",
    "straggler": "make that rank's work lighter where it loses the time: more loader workers (data.num_workers) or a "
    "faster source for data loading; otherwise look at what else runs on its host, or at its device",
}

#: the statuses a symptom turns into SYMPTOM when asked (probes.symptoms.fail=true); others already fail
JUDGED_OK = ("PASS", "DONE", "DEBUG")


@dataclass(frozen=True)
class Symptom:
    """One symptom: `name` (a key of SUGGESTIONS), the `step` first seen, `where` (the parameter, module or signal
    at fault), `value` (the number past its threshold), `detail` (what was measured) and `suggestion` (the fix)."""

    name: str
    step: int
    where: str
    value: float | None
    detail: str
    suggestion: str = ""

    def __post_init__(self):
        if self.name not in SUGGESTIONS:
            raise ValueError(f"unknown symptom {self.name!r}: one of {', '.join(SUGGESTIONS)}")
        if not self.suggestion:
            object.__setattr__(self, "suggestion", SUGGESTIONS[self.name])

    def as_dict(self) -> dict:
        value = self.value
        if value is not None and math.isfinite(value):
            value = float(f"{value:.4g}")
        return {**asdict(self), "value": value}

    def line(self) -> str:
        """The console line: name, where, when, what, and the fix."""
        return (
            f"symptom {self.name} in {self.where} at step {self.step}: {self.detail}; try: {self.suggestion}"
        )


def nonfinite(stopped) -> Symptom:
    """The `nonfinite` symptom of a run the guard stopped (`stopped`: harness.train.nonfinite.NonFinite)."""
    detail = "a NaN or inf reached the gradients; the run stopped before that step's update"
    return Symptom("nonfinite", stopped.step, stopped.where, None, detail)


def judge(verdict, fail: bool) -> None:
    """With `fail` (probes.symptoms.fail=true), a PASS, DONE or DEBUG verdict with any symptom becomes SYMPTOM
    (exit 5), its status kept as `judged`."""
    symptoms = verdict.items.setdefault("symptoms", [])
    if fail and symptoms and verdict.status in JUDGED_OK:
        verdict.items["judged"] = verdict.status
        verdict.status = "SYMPTOM"
