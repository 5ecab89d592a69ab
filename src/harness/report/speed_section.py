"""A run's Speed section (`speed_part`): verdict.json's `perf` (the speed figures' medians, the run's whole wall
time and the training loop's split as stacked bars) and metrics.csv's perf/ curves; the console's phrases of them
(`speed_line`, `wall_phrase`); an MFU above 1 is never shown (`mfu_of`)."""

from __future__ import annotations

from html import escape

from harness.report.charts import Chart, Series, line_chart, stacked_bar
from harness.report.html import missing, number, table

#: verdict.json's perf figures the table shows, and what each is
FIGURES = {
    "tokens_per_s": "tokens a second, every position of the batch (every rank's)",
    "loss_tokens_per_s": "tokens a second in the loss (loss_mask)",
    "examples_per_s": "examples a second",
    "step_s": "seconds a step",
    "mfu": "model FLOPs utilization: the model's FLOPs a second over one device's peak",
}


#: perf.wall's phases, as the console and the page name them
WALL = {
    "startup": "start-up",
    "data": "data",
    "model": "model",
    "preflight": "preflight",
    "trainer": "Trainer set-up",
    "steps": "steps",
    "validation": "validation",
    "checkpoint": "checkpoints",
    "end": "end of fit",
    "page": "page",
    "exit": "exit",
}


def mfu_of(perf: dict | None) -> float | None:
    """perf.mfu where it is a share (0 to 1); None where unknown, or above 1 (a peak measured low: a fault)."""
    mfu = perf.get("mfu") if isinstance(perf, dict) else None
    ok = isinstance(mfu, (int, float)) and not isinstance(mfu, bool) and 0 <= mfu <= 1
    return float(mfu) if ok else None


def _mfu_why(perf: dict) -> str:
    """Why perf.mfu is not shown."""
    if perf.get("mfu_fault"):
        return f"not given, a measurement fault: {perf['mfu_fault']}"
    if isinstance(perf.get("mfu"), (int, float)):
        return (
            f"not shown: {perf['mfu']:.4g} is above 1, a fault of the peak ({perf.get('peak')}); set "
            "perf.peak_flops, or delete the peak cache (perf.peak_cache) to measure it again"
        )
    return "unknown: no peak for this device (perf.peak_flops sets it)"


def _wall_of(perf: dict) -> dict:
    wall = perf.get("wall")
    return wall if isinstance(wall, dict) and isinstance(wall.get("seconds"), dict) else {}


def run_seconds(v: dict) -> float | None:
    """A run's seconds: perf.wall's total (the process's, from its start), else verdict.json's `seconds` (the
    training task's)."""
    total = _wall_of(v.get("perf") if isinstance(v.get("perf"), dict) else {}).get("total")
    return total if isinstance(total, (int, float)) else v.get("seconds")


def wall_phrase(perf: dict | None, seconds: float | None) -> str:
    """The run's wall time for the console: '6.1 s in all (start-up 3.8 s, ...)' from perf.wall, else `seconds`."""
    wall = _wall_of(perf) if isinstance(perf, dict) else {}
    if not isinstance(wall.get("total"), (int, float)):
        return f"{seconds or 0:.1f} s"
    parts = [
        f"{WALL.get(phase, phase)} {spent:.1f} s"
        for phase, spent in wall["seconds"].items()
        if isinstance(spent, (int, float)) and spent >= 0.05
    ]
    whole = " in all" if "startup" in wall["seconds"] else ""  # else from the task's start: a sweep's job
    return f"{wall['total']:.1f} s{whole} ({', '.join(parts)})"


def _wall_part(perf: dict) -> list[str]:
    wall = _wall_of(perf)
    if not wall:
        return []
    until = (
        "the process's exit"
        if wall.get("until") == "exit"
        else "the verdict's writing (the page and the exit after it are added to verdict.json's perf.wall "
        "when the process exits)"
    )
    shares = [(WALL.get(phase, phase), share) for phase, share in (wall.get("share") or {}).items()]
    return [
        stacked_bar(f"where the run's {number(wall.get('total'))} s went", shares),
        f"<p>{escape(wall_phrase(perf, None))}: from the process's start to {escape(until)}.</p>",
    ]


def speed_part(v: dict | None, curves: dict) -> str:
    """The figures' table, the run's wall time and the loop's split, and the speed and the phases' seconds over
    the steps."""
    perf = (v or {}).get("perf")
    if not isinstance(perf, dict):
        return missing(
            "no speed figures: the run stopped before its first logging step, predates them, or had "
            "perf.enabled=false"
        )
    rows = [[key, perf.get(key), what] for key, what in FIGURES.items()]
    if mfu_of(perf) is None:
        rows[list(FIGURES).index("mfu")][1:] = [None, _mfu_why(perf)]
    note = (
        f"Medians over {number(perf.get('log_steps'))} logging steps, the first {number(perf.get('warmup_steps'))} "
        f"steps left out; {number(perf.get('flops_per_step'))} FLOPs a step in {perf.get('dtype')}, peak "
        f"{number(perf.get('peak_flops'))} FLOP/s ({perf.get('peak') or 'unknown: perf.peak_flops sets it'})."
    )
    shares = perf.get("time_share") if isinstance(perf.get("time_share"), dict) else {}
    parts = [
        table(["figure", "median", "what it is"], rows, "speed-table"),
        f"<p>{escape(note)}</p>",
        *_wall_part(perf),
        stacked_bar("where the training loop's time went (each phase's share of it)", list(shares.items())),
    ]
    speed = [Series("tokens a second", curves.get("perf/tokens_per_s", []))]
    parts.append(line_chart(Chart("speed", "step", "tokens/s"), speed))
    order = [*shares, *sorted(n.rpartition("/")[2] for n in curves if n.startswith("perf/time/"))]
    timed = {phase: curves.get(f"perf/time/{phase}", []) for phase in dict.fromkeys(order)}
    timed.pop("setup", None)  # the fit's set-up, no step's: in the first window alone
    phases = [Series(phase, points) for phase, points in timed.items() if any(y > 0 for _, y in points)]
    parts.append(line_chart(Chart("seconds a step by phase", "step", "seconds", log_y=True), phases))
    return "\n".join(parts)


def speed_line(perf: dict | None) -> str:
    """The run's speed in one line for the console: tokens a second, a step's time, MFU, the loop's split."""
    if not isinstance(perf, dict) or perf.get("tokens_per_s") is None:
        return ""
    mfu, faulty = mfu_of(perf), perf.get("mfu_fault") or isinstance(perf.get("mfu"), (int, float))
    why = "a measurement fault" if faulty else "perf.peak_flops"
    mfu = f", MFU {mfu:.1%}" if mfu is not None else f", no MFU ({why})"
    shares = perf.get("time_share") if isinstance(perf.get("time_share"), dict) else {}
    shown = sorted(((p, s) for p, s in shares.items() if (s or 0) >= 0.005), key=lambda p: -p[1])
    split = ", ".join(f"{phase} {share:.0%}" for phase, share in shown)
    return (
        f"{perf['tokens_per_s']:,.0f} tokens/s ({perf.get('loss_tokens_per_s') or 0:,.0f} in the loss), "
        f"{1e3 * (perf.get('step_s') or 0):.1f} ms a step{mfu}; the training loop's time: {split}"
    )
