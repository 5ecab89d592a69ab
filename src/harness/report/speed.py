"""A run's Speed section (`speed_part`): verdict.json's `perf` (the speed figures' medians, the time split as one
stacked bar) and metrics.csv's perf/ curves; a run without them says so."""

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


def speed_part(v: dict | None, curves: dict) -> str:
    """The figures' table, the time split, and the speed and the phases' seconds over the steps."""
    perf = (v or {}).get("perf")
    if not isinstance(perf, dict):
        return missing(
            "no speed figures: the run stopped before its first logging step, predates them, or had "
            "perf.enabled=false"
        )
    rows = [[key, perf.get(key), what] for key, what in FIGURES.items()]
    note = (
        f"Medians over {number(perf.get('log_steps'))} logging steps, the first {number(perf.get('warmup_steps'))} "
        f"steps left out; {number(perf.get('flops_per_step'))} FLOPs a step in {perf.get('dtype')}, peak "
        f"{number(perf.get('peak_flops'))} FLOP/s ({perf.get('peak') or 'unknown: perf.peak_flops sets it'})."
    )
    shares = perf.get("time_share") if isinstance(perf.get("time_share"), dict) else {}
    parts = [
        table(["figure", "median", "what it is"], rows, "speed-table"),
        f"<p>{escape(note)}</p>",
        stacked_bar("where a step's time goes (each phase's median share)", list(shares.items())),
    ]
    speed = [Series("tokens a second", curves.get("perf/tokens_per_s", []))]
    parts.append(line_chart(Chart("speed", "step", "tokens/s"), speed))
    order = [*shares, *sorted(n.rpartition("/")[2] for n in curves if n.startswith("perf/time/"))]
    timed = {phase: curves.get(f"perf/time/{phase}", []) for phase in dict.fromkeys(order)}
    phases = [Series(phase, points) for phase, points in timed.items() if any(y > 0 for _, y in points)]
    parts.append(line_chart(Chart("seconds a step by phase", "step", "seconds", log_y=True), phases))
    return "\n".join(parts)


def speed_line(perf: dict | None) -> str:
    """The run's speed in one line for the console: tokens a second, a step's time, MFU, the time split."""
    if not isinstance(perf, dict) or perf.get("tokens_per_s") is None:
        return ""
    mfu = (
        f", MFU {perf['mfu']:.1%}"
        if isinstance(perf.get("mfu"), (int, float))
        else ", no MFU (perf.peak_flops)"
    )
    shares = perf.get("time_share") if isinstance(perf.get("time_share"), dict) else {}
    split = ", ".join(
        f"{phase} {share:.0%}" for phase, share in sorted(shares.items(), key=lambda p: -(p[1] or 0)) if share
    )
    return (
        f"{perf['tokens_per_s']:,.0f} tokens/s ({perf.get('loss_tokens_per_s') or 0:,.0f} in the loss), "
        f"{1e3 * (perf.get('step_s') or 0):.1f} ms a step{mfu}; a step's time: {split}"
    )
