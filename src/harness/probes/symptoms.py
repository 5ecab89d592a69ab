"""The symptom detectors: `Symptoms` reads the probes' stream (every row the sink logs: gradient norms, update
ratios, activations, gradient reach) and the training loss, and reports what a person would otherwise have to
spot in the charts (harness.symptoms: the record, the names, the suggestions).

    vanishing_gradients    the first block's gradient RMS a tiny fraction of the last block's, `patience`
                           readings in a row; or the input-gradient reach (grad_by_position) at the end of
                           training at or below `reach`
    exploding_gradients    the total gradient norm `explode_jump` times its running median, its recent
                           median `explode_growth` times its first, or above `explode_norm` `patience` steps
                           in a row; or the first block's gradient RMS 1/`layer_ratio` times the last's
    dead_units             a ReLU-like module's outputs exactly zero for >= `dead_fraction` of them, or
                           >= `dead_units` of its units dead (zero at every position of the batch)
    saturated_activations  a tanh/sigmoid-like module's outputs saturated for >= `saturated_fraction`
    loss_spike             the loss `spike_factor` times its running median (and `spike_min` x the initial loss
                           above it, and `spike_sigmas` robust deviations) for `spike_stay` steps in a row,
                           or `spikes` times within `window`
    no_progress            after `window` steps at a learning rate >= a tenth of its base, the loss within
                           `progress` of where it started
    update_ratio           a weight matrix's ‖Δw‖/‖w‖ above `ratio_high` or (the loss still above half its
                           start) below `ratio_low`, `patience` readings in a row

The loss is kept on the device every step and read every `every` steps, in one transfer; the rest is read from
rows other probes already brought to the host, so this probe adds no sync of its own in between. Each symptom is
reported once per name and place (the sink: console, `symptoms/<name>` on every logger, a table for the
trackers, verdict.json `symptoms`)."""

from __future__ import annotations

import math
import statistics

import torch

from harness.optim import embedding_weights
from harness.probes.base import Probe, whole
from harness.probes.norms import parameter_names
from harness.symptoms import Symptom

#: an activations statistic -> the symptom it shows, the threshold's argument, what it counts
ACTIVATION_LIMITS = {
    "zero_frac": ("dead_units", "dead_fraction", "of its outputs exactly zero"),
    "dead_frac": ("dead_units", "dead_units", "of its units dead (zero at every position)"),
    "saturated": ("saturated_activations", "saturated_fraction", "of its outputs saturated"),
}
#: the running medians the loss and gradient rules compare against: this many latest values
RUNNING = 20
#: a total gradient norm below this is no explosion, whatever it grew from (a zero-initialized branch, a norm
#: near convergence): the gradient of a mean loss is of order 1 for activations of order 1
EXPLODE_MIN = 10.0


def blocks_of(names: list[str]) -> list[tuple[str, list[str]]]:
    """The numbered blocks of a model, in order, each with its parameters' names: `layers.0`, `h.11`, `net.4`
    (the prefix up to the first numeric part of a name). Where several containers are numbered (an encoder's
    and a decoder's layers), the one with the most blocks; [] where fewer than two."""
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


class Streaks:
    """How many readings in a row each place has been past its threshold."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def update(self, where: str, past: bool) -> int:
        self.counts[where] = self.counts.get(where, 0) + 1 if past else 0
        return self.counts[where]


class Symptoms(Probe):
    """Detects the symptoms above while the run trains; thresholds and windows are its arguments
    (conf/probes/default.yaml says what each means). `fail` is read by harness.run: a run with a symptom
    ends as SYMPTOM (exit 5) instead of PASS or DONE."""

    def __init__(
        self,
        every: int | None = 10,
        fail: bool = False,
        window: int = 100,
        patience: int = 3,
        layer_ratio: float = 1e-3,
        reach: float = 0.0,
        explode_jump: float = 100.0,
        explode_growth: float = 100.0,
        explode_norm: float = 1000.0,
        dead_fraction: float = 0.99,
        saturated_fraction: float = 0.9,
        spike_factor: float = 2.0,
        spike_min: float = 0.1,
        spikes: int = 2,
        spike_stay: int = 8,
        spike_sigmas: float = 6.0,
        progress: float = 0.05,
        ratio_high: float = 1.0,
        ratio_low: float = 1e-6,
        dead_units: float = 0.5,
    ):
        super().__init__(every)
        self.fail = fail
        self.window = whole("window", window, 2, "steps the loss rules look back over (try 100)")
        self.patience = whole("patience", patience, 1, "readings in a row before a symptom (try 3)")
        self.spikes = whole("spikes", spikes, 1, "spikes within the window that make a symptom (try 2)")
        self.spike_stay = whole("spike_stay", spike_stay, 1, "steps in a row a spike lasts to be one (try 8)")
        self.layer_ratio, self.reach, self.progress = layer_ratio, reach, progress
        self.explode_jump, self.explode_growth, self.explode_norm = explode_jump, explode_growth, explode_norm
        self.dead_fraction, self.dead_units, self.saturated_fraction = (
            dead_fraction,
            dead_units,
            saturated_fraction,
        )
        self.spike_factor, self.spike_min, self.spike_sigmas = spike_factor, spike_min, spike_sigmas
        self.ratio_high, self.ratio_low = ratio_high, ratio_low
        self.blocks: list[tuple[str, list[str], list[int]]] = []
        self.matrices: list[str] = []
        self.ratio_key = self.block_key = None
        self.base_lr = self.lr = None
        self.listened = None  # the sink this probe reads
        self.reset()

    def reset(self) -> None:
        """What one fit has seen: nothing yet."""
        self.pending_losses: list[torch.Tensor] = []  # on the device, since the last reading
        self.losses: list[float] = []  # the first 5 optimizer steps' and the latest, on the host
        self.steps_read = 0
        self.spike_events: list[list[int]] = []  # [first step, last step] of each run of spike steps
        self.grad_totals: list[float] = []
        self.streaks = Streaks()
        self.first_ratio: float | None = None
        self.ending = False
        self.reported: set[tuple[str, str]] = set()
        self.activation_keys: list[tuple[str, str, str]] | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.reset()
        if self.listened is not self.sink:
            self.sink.listen(self.read)
            self.listened = self.sink
        embedded = embedding_weights(
            pl_module
        )  # sparse, row by row: neither a block's nor a matrix's measure
        named = [(n, p) for n, p in parameter_names(pl_module) if p.requires_grad and id(p) not in embedded]
        sizes = {n: p.numel() for n, p in named}
        self.blocks = [(b, ps, [sizes[p] for p in ps]) for b, ps in blocks_of([n for n, _ in named])]
        self.matrices = [n for n, p in named if p.ndim >= 2]
        # the keys that say a row holds what a check reads (looked up every step: built once)
        self.ratio_key = f"update_ratio/{self.matrices[0]}" if self.matrices else None
        self.block_key = f"grad_norm/{self.blocks[0][1][0]}" if self.blocks else None
        group = trainer.optimizers[0].param_groups[0] if trainer.optimizers else {}
        self.base_lr = group.get("initial_lr", group.get("lr"))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # once an optimizer step (not a micro-batch): the loss it follows, kept on the device
        loss = getattr(pl_module, "last_loss", None)  # detached already (HarnessModule)
        if loss is not None and trainer.is_global_zero:
            self.pending_losses.append(loss)
        self.lr = getattr(pl_module, "step_lr", None)

    def on_train_end(self, trainer, pl_module) -> None:
        self.ending = True  # the rows flushed from here on are the end of training's
        self.read_losses(trainer.global_step - 1)  # the last step's loss, global_step having moved past it

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.read_losses(trainer.global_step)  # a step that raised (NonFinite) follows the losses read here

    def read(self, step: int, row: dict) -> None:
        """The sink's row of `step` (called at each flush): the checks whose numbers it holds."""
        total = row.get("grad_norm/total")
        if total is not None:
            self.check_exploding(step, total)
        if "grad_by_position/reach" in row:
            self.check_reach(step, row["grad_by_position/reach"])
        if self.ratio_key in row:
            self.check_update_ratios(step, row)
        if not self.due(step):
            return
        self.read_losses(step)
        self.check_growth(step)
        if self.block_key in row:
            self.check_blocks(step, row)
        self.check_activations(step, row)

    def report(
        self,
        name: str,
        step: int,
        where: str,
        value: float | None,
        detail: str,
        fix: str = "",
        now=None,
        side="",
    ) -> None:
        """One symptom to the sink, once per name (and `side`, for one that has two), its `symptoms/<name>` scalar
        at step `now` (default: `step`). The sink itself reports a name again for another `where`: this probe
        reports each of its checks once, at the first place it finds."""
        if (name, side) in self.reported:
            return
        self.reported.add((name, side))
        self.sink.report(Symptom(name, step, where, value, detail, fix), now=step if now is None else now)

    # the loss: every step's value, read in one transfer at each reading
    def read_losses(self, step: int) -> None:
        if not self.pending_losses:
            return
        values = torch.stack([v.float().reshape(()) for v in self.pending_losses]).tolist()
        self.pending_losses = []
        for i, value in enumerate(values):
            self.check_spike(step - len(values) + 1 + i, value, now=step)
        self.check_progress(step)

    def initial_loss(self) -> float | None:
        finite = [v for v in self.losses[:5] if math.isfinite(v)]
        return statistics.median(finite) if finite else None

    def check_spike(self, step: int, loss: float, now: int) -> None:
        """A spike: the loss `spike_factor` times its running median, above it by `spike_min` x the initial loss
        and by `spike_sigmas` robust standard deviations of the running window (batch-to-batch noise is no spike).
        Consecutive spike steps are one event; the symptom is an event that stays (`spike_stay` steps) or one
        that recurs (`spikes` events within `window` steps). One that recovers at once is LM training's usual
        blip (a GPT warming up on synthetic data has one)."""
        recent = [v for v in self.losses[-RUNNING:] if math.isfinite(v)]
        self.losses.append(loss)
        self.steps_read += 1
        if len(self.losses) > 5 + self.window + RUNNING:  # the first 5 and the latest: all the rules read
            del self.losses[5 : 5 + self.window]
        start = self.initial_loss()
        if len(recent) < 10 or start is None or not math.isfinite(loss):
            return
        median = statistics.median(recent)
        if not (median > 0 and loss > self.spike_factor * median and loss - median > self.spike_min * start):
            return
        spread = 1.4826 * statistics.median(abs(v - median) for v in recent)  # a robust standard deviation
        if loss - median <= self.spike_sigmas * spread:
            return
        events = self.spike_events
        if events and events[-1][1] == step - 1:
            events[-1][1] = step  # the same event goes on
        else:
            events.append([step, step])
        self.spike_events = events = [e for e in events if e[1] > step - self.window]
        stays = events[-1][1] - events[-1][0] + 1
        if stays >= self.spike_stay or len(events) >= self.spikes:
            how = (
                f"for {stays} steps in a row"
                if stays >= self.spike_stay
                else f"{len(events)} times within {self.window} steps"
            )
            detail = (
                f"the loss jumped to {loss:.4g}, {loss / median:.1f}x its running median {median:.4g}, {how}"
            )
            self.report("loss_spike", events[0][0], "train/loss", loss, detail, now=now)

    def annealed(self) -> bool:
        """Whether the schedule holds the learning rate below a tenth of its base now (warmup, decay, zero)."""
        if self.lr is None or self.base_lr is None:
            return True
        return self.lr <= 0 or self.lr < 0.1 * self.base_lr

    def check_progress(self, step: int) -> None:
        start = self.initial_loss()
        if self.steps_read < self.window or not start:
            return
        if self.annealed():  # warming up or annealed: not the optimizer's fault
            return
        now = [v for v in self.losses[-10:] if math.isfinite(v)]
        if not now:
            return
        moved = (start - statistics.median(now)) / start
        if abs(moved) < self.progress:
            detail = (
                f"after {self.steps_read} steps the loss is {statistics.median(now):.4g}, {abs(moved):.1%} from "
                f"where it started ({start:.4g}), at learning rate {self.lr:.3g}"
            )
            self.report("no_progress", step, "train/loss", moved, detail)

    # gradients
    def check_exploding(self, step: int, total: float) -> None:
        history = self.grad_totals
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
            detail = (
                f"the total gradient norm is {total:.4g}, above {self.explode_norm:g} for {self.patience} steps in "
                "a row (a mean loss's gradient is of the order of the activations: these are far too large)"
            )
            self.report("exploding_gradients", step, "grad_norm/total", total, detail)
        history.append(total)
        if len(history) > 5 + 2 * RUNNING:  # the first 5 and the latest: all the rules read
            del history[5 : 5 + RUNNING]

    def check_growth(self, step: int) -> None:
        """The total gradient norm's median of the latest 5 against its first 5's, at each reading."""
        history = self.grad_totals
        if len(history) >= 10:
            first, last = statistics.median(history[:5]), statistics.median(history[-5:])
            if first > 0 and last > self.explode_growth * first and last >= EXPLODE_MIN:
                detail = f"the total gradient norm grew {last / first:.0f}x, from {first:.4g} to {last:.4g}"
                self.report("exploding_gradients", step, "grad_norm/total", last, detail)

    def check_reach(self, step: int, reach: float) -> None:
        """The trained model's reach (grad_by_position's last measurement, at the end of training) at or below
        `reach` (0: the gradient underflowed before the first input). The measurements before it are left out:
        the gated cells (LSTM) start with no reach and grow one by training, and a tanh RNN's can drop to 0 for
        a while and come back."""
        if self.ending and step > 0 and math.isfinite(reach) and reach <= self.reach:
            detail = (
                f"reach {reach:.3g} after {step} steps: of the loss's gradient at the second-to-last input, that "
                "fraction reaches the first (0: it underflowed in float32 on the way back through the sequence)"
            )
            self.report(
                "vanishing_gradients", step, "input positions (grad_by_position)", reach, detail, side="reach"
            )

    def check_blocks(self, step: int, row: dict) -> None:
        """The first block's gradient RMS against the last block's: far below, the gradient vanishes on its way
        back through the layers; far above, it explodes (an init too large, no normalization)."""
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
        """Every weight matrix's ‖Δw‖/‖w‖; one symptom for each direction, naming the first matrix past its limit
        and how many others are."""
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

    # activations
    def check_activations(self, step: int, row: dict) -> None:
        """Each watched module's zero, dead-unit and saturated fractions against their limits."""
        if self.activation_keys is None and any(k.startswith("act/") for k in row):
            # the activations probe logs the same keys at every reading: found once
            self.activation_keys = [(k, *k[4:].rsplit("/", 1)) for k in row if k.startswith("act/")]
            self.activation_keys = [entry for entry in self.activation_keys if entry[2] in ACTIVATION_LIMITS]
        for key, module, stat in self.activation_keys or []:
            value = row.get(key)
            if value is None or not math.isfinite(value):
                continue
            name, limit, what = ACTIVATION_LIMITS[stat]
            limit = getattr(self, limit)
            if self.streaks.update(f"{stat}:{module}", value >= limit) >= self.patience:
                detail = f"{value:.1%} {what} for {self.patience} readings in a row"
                self.report(name, step, module, value, detail, side=module)
