"""The gradients' rules, `GradientRules`: `exploding_gradients`, `vanishing_gradients` (block RMS ratios,
norms, a trained reach of 0) and `update_ratio`; `blocks_of` finds the numbered blocks."""

from __future__ import annotations

import logging
import math
import statistics

from harness.probes.detectors.detector import RUNNING

log = logging.getLogger(__name__)

#: a total gradient norm below this is no explosion, whatever it grew from (a zero-initialized branch, a norm
#: near convergence): the gradient of a mean loss is of order 1 for activations of order 1
EXPLODE_MIN = 10.0


def blocks_of(names: list[str]) -> list[tuple[str, list[str]]]:
    """The numbered blocks of a model, in order, with their parameters' names (`layers.0`, `h.11`); [] where
    fewer than two."""
    containers: dict[str, dict[int, list[str]]] = {}
    for name in names:
        parts = name.split(".")
        index = next((i for i, part in enumerate(parts) if part.isdigit()), None)
        if index is not None:
            blocks = containers.setdefault(".".join(parts[:index]), {})
            blocks.setdefault(int(parts[index]), []).append(name)
    if not containers:
        return []
    container, blocks = max(containers.items(), key=lambda item: len(item[1]))
    prefix = f"{container}." if container else ""
    return [(f"{prefix}{i}", blocks[i]) for i in sorted(blocks)] if len(blocks) >= 2 else []


class GradientRules:
    """Mixed into the Symptoms probe: reads `grad_totals`, `blocks`, `matrices` and the thresholds, reports
    through it."""

    def check_exploding(self, step: int, total: float) -> None:
        """The total gradient norm against its running median and `explode_norm`: rules of consecutive steps, fed
        every step by probes.norms.every=1; further apart, they judge the readings they get, and say so once."""
        history = self.grad_totals
        self._note_period(step)
        if not math.isfinite(total):
            return
        if len(history) >= 5 and total >= EXPLODE_MIN:
            median = statistics.median(history[-RUNNING:])
            if median > 0 and total > self.explode_jump * median:
                detail = (
                    f"the total gradient norm jumped to {total:.4g}, {total / median:.0f}x its running median"
                )
                self.report("exploding_gradients", step, "grad_norm/total", total, detail)
        if self.streaks.update("norm", total > self.explode_norm) >= self.patience:
            apart = f"readings {self.total_period} steps apart" if self.total_period else "steps"
            detail = (
                f"the total gradient norm is {total:.4g}, above {self.explode_norm:g} for {self.patience} {apart} in "
                "a row (a mean loss's gradient is of the order of the activations: these are far too large)"
            )
            self.report("exploding_gradients", step, "grad_norm/total", total, detail)
        history.append(total)
        if len(history) > 5 + 2 * RUNNING:  # the first 5 and the latest: all the rules read
            del history[5 : 5 + RUNNING]

    def _note_period(self, step: int) -> None:
        """The steps between two readings of the total gradient norm: a warning, once, where they are over 1."""
        if self.total_step is not None and step - self.total_step > 1 and self.total_period is None:
            self.total_period = step - self.total_step
            log.warning(
                "exploding_gradients reads grad_norm/total every %d steps (probes.norms.every), not every step: a "
                "jump between two readings goes unseen and its running median and patience count readings; "
                "probes.norms.every=1 judges every step",
                self.total_period,
            )
        self.total_step = step

    def check_growth(self, step: int) -> None:
        """The total gradient norm's median of the latest 5 readings against that of its first 5."""
        history = self.grad_totals
        if len(history) >= 10:
            first, last = statistics.median(history[:5]), statistics.median(history[-5:])
            if first > 0 and last > self.explode_growth * first and last >= EXPLODE_MIN:
                detail = f"the total gradient norm grew {last / first:.0f}x, from {first:.4g} to {last:.4g}"
                self.report("exploding_gradients", step, "grad_norm/total", last, detail)

    def check_reach(self, step: int, reach: float) -> None:
        """The trained model's reach, at the end only, at or below `reach` (earlier ones come and go)."""
        if self.ending and step > 0 and math.isfinite(reach) and reach <= self.reach:
            detail = (
                f"reach {reach:.3g} after {step} steps: of the loss's gradient at the second-to-last input, that "
                "fraction reaches the first (0: it underflowed in float32 on the way back through the sequence)"
            )
            self.report(
                "vanishing_gradients", step, "input positions (grad_by_position)", reach, detail, side="reach"
            )

    def check_blocks(self, step: int, row: dict) -> None:
        """The first block's gradient RMS against the last's: far below it vanishes, far above it explodes."""
        rms = []
        for _, names, sizes in (self.blocks[0], self.blocks[-1]):
            pairs = [(row.get(f"grad_norm/{n}", 0.0), s) for n, s in zip(names, sizes, strict=True)]
            live = [(g, s) for g, s in pairs if g > 0]  # a dead parameter is dead_params' to report
            rms.append(math.sqrt(sum(g * g for g, _ in live) / sum(s for _, s in live)) if live else None)
        if None in rms or not rms[1] or not all(map(math.isfinite, rms)):
            return
        ratio = rms[0] / rms[1]
        self.first_ratio = ratio if self.first_ratio is None else self.first_ratio
        first, last = self.blocks[0][0], self.blocks[-1][0]
        for name, past in (
            ("vanishing_gradients", ratio < self.layer_ratio),
            ("exploding_gradients", ratio > 1 / self.layer_ratio),
        ):
            if self.streaks.update(name, past) >= self.patience:
                detail = (
                    f"the gradient RMS of the first block ({first}) is {ratio:.2g} times the last block's ({last}) "
                    f"for {self.patience} readings in a row (it was {self.first_ratio:.2g} at the first reading)"
                )
                self.report(name, step, first, ratio, detail, side="blocks" if name.startswith("v") else "")

    def check_update_ratios(self, step: int, row: dict) -> None:
        """Every weight matrix's ‖Δw‖/‖w‖; a symptom each direction, naming the first past its limit. It judges
        the learning rate's lasting size, not one step: `patience` readings probes.norms.ratio_every apart."""
        start = self.initial_loss()
        unconverged = bool(start) and bool(self.losses) and self.losses[-1] > 0.5 * start
        unconverged = unconverged and not self.annealed()  # warmup or decay: small steps on purpose
        past: dict[str, list[tuple[str, float]]] = {"high": [], "low": []}
        for name in self.matrices:
            ratio, grad = row.get(f"update_ratio/{name}"), row.get(f"grad_norm/{name}")
            if ratio is None or not math.isfinite(ratio) or not grad:
                continue
            high, low = ratio > self.ratio_high, unconverged and ratio < self.ratio_low
            if self.streaks.update(f"ratio:{name}", high or low) >= self.patience:
                past["high" if high else "low"].append((name, ratio))
        for side, found in past.items():
            if not found:
                continue
            (name, ratio), limit = found[0], self.ratio_high if side == "high" else self.ratio_low
            others = (
                f" (and {len(found) - 1} more of the {len(self.matrices)} weight matrices)"
                if found[1:]
                else ""
            )
            detail = (
                f"‖Δw‖/‖w‖ = {ratio:.3g}{others} for {self.patience} readings in a row, "
                f"{'above' if side == 'high' else 'below'} {limit:g} (healthy: around 1e-3)"
            )
            fix = "lower" if side == "high" else "raise"
            self.report(
                "update_ratio", step, name, ratio, detail, f"{fix} the learning rate (optim.lr)", side=side
            )
