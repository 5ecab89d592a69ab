"""What the non-finite guard costs, in faults.json: `nonfinite_guard`, a raw training step of the small reference model
with the real NonFiniteGuard hook (one fused norm over the gradients, one host sync) over the same step without it,
target <= 1.02. torch's anomaly mode is measured beside it for scale (details only)."""

from __future__ import annotations

import torch

from benchmarks import ratio, timed, write
from benchmarks.loop import reference
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard

TARGET = 1.02


def main(reps: int = 7) -> dict:
    model, batch = reference("small")
    module = HarnessModule(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    guard = NonFiniteGuard()
    guard.on_train_start(None, module)  # as in a run: the parameters listed once
    guard.batch = batch

    def step(check: bool = False, anomaly: bool = False) -> None:
        with torch.autograd.set_detect_anomaly(anomaly):
            loss = module.loss(model(batch["input_ids"]), batch["targets"], batch["loss_mask"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        if check:
            guard.on_before_optimizer_step(None, module, optimizer)  # the trainer is only read on a failure
        optimizer.step()

    guarded = ratio(lambda: step(check=True), step, reps=reps, inner=5)
    anomaly = ratio(lambda: step(anomaly=True), step, reps=3, inner=2)
    # the guard's own time, clocked alone: a figure the machine's noise moves less than the ratio
    check = timed(lambda: guard.on_before_optimizer_step(None, module, optimizer), 50)
    plain = timed(step, 5)
    figure = round(guarded["median"], 3)
    write(
        "faults",
        {"nonfinite_guard": figure},
        {
            "target": f"<= {TARGET}",
            "guard_over_plain_step": guarded,
            "anomaly_mode_over_plain_step": anomaly,
            "guard_ms": round(1e3 * check, 3),
            "guard_share_of_a_step": round(check / plain, 4),
        },
    )
    return {"nonfinite_guard": (figure, figure <= TARGET)}
