"""A preflight check a fork might add: in eval mode, the model is a function of its input.

Dropout called as `F.dropout(x, p, training=True)`, or noise added in forward without looking at
`self.training`, keeps validation and generation random. The built-in `determinism` check re-seeds
between its two passes, so it cannot see this; `global_rng` sees it only when the randomness comes from
the global generators. Two unseeded eval passes see it whatever its source."""

from __future__ import annotations

import torch
from torch import nn

from harness.checks import FAIL, PASS, CheckResult
from harness.data.batch import to_device, training_mode


def eval_deterministic(model: nn.Module, batch: dict, cfg=None) -> CheckResult:
    """Two forward passes in eval mode, without re-seeding between them, give identical logits."""
    batch = to_device(batch, model)
    with training_mode(model, training=False), torch.no_grad():
        first, second = model(batch["input_ids"]), model(batch["input_ids"])
    gap = (first - second).abs().amax().item()
    if gap > 0:
        return CheckResult(
            "eval_deterministic",
            FAIL,
            f"two eval-mode passes over the same batch differ by up to "
            f"{gap:.3g}: randomness stays on in eval mode (use nn.Dropout, or pass "
            "training=self.training to F.dropout)",
        )
    return CheckResult("eval_deterministic", PASS, "eval mode is deterministic: two passes, identical logits")
