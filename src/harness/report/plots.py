"""The sweep's figures (`grad_by_position`, `reach_by_length`, `loss_curves`, each drawn by its `*_figure`), and
what a run's figures share: `log_lines_with_zeros` (an exact zero on a log axis as ▼ on the floor) and
`save_figure` (every title and label wrapped to fit the canvas)."""

# matplotlib through Figure objects and the Agg canvas only: no pyplot, no global figure registry, no GUI backend.
# A gradient that underflowed to exactly zero is the finding, not a gap: a log axis gets it drawn on its floor.
# Every figure has a layout engine (constrained): it moves the axes to make room for the labels, yet never shortens a
# text wider than the canvas (a suptitle, a model's name): save_figure breaks those into lines first.

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from pathlib import Path

#: what tells lines apart within a panel (the panel is the model), in the order labels name them
VARYING = ("length", "n", "rule", "data", "mode", "seed")
UNDERFLOW = "0 (underflow)"
#: the sweep's PNGs' resolution
DPI = 110
#: characters a legend's line holds at most (7 points: about a third of the narrowest panel)
LEGEND_WIDTH = 40


def _figure(panels: int, width: float = 4.6, height: float = 3.6):
    """A Figure with `panels` axes side by side on the Agg canvas (PNG, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * max(panels, 1), height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(panels, 1), squeeze=False)[0]
    return fig, list(axes)


def save_figure(fig, path: Path, **savefig) -> Path:
    """Save `fig` as `path` (returned), its titles and labels wrapped to fit (wrap_labels)."""
    wrap_labels(fig).savefig(path, **savefig)
    return path


def wrap_labels(fig):
    """`fig` (returned) with every title and axis label broken between words into lines that fit the room it has:
    the figure's width for its suptitle, its axes' width for a title or x label, their height for a y label."""
    from matplotlib import cbook

    renderer = fig.canvas.get_renderer()
    for text, room in _rooms(fig):
        if text.get_text() and not cbook.is_math_text(text.get_text()):  # mathtext is not broken into words
            text.set_text(_wrapped(text.get_text(), room, text.get_fontproperties(), renderer))
    return fig


def _rooms(fig) -> list[tuple]:
    """(text, pixels it may span) for the figure's texts (its suptitle too) and each axes' title and labels."""
    rooms = [(text, 0.96 * fig.bbox.width) for text in fig.texts]
    for ax in fig.axes:
        box = ax.get_window_extent()  # before the layout engine runs: its slot with the default margins
        rooms += [(ax.title, box.width), (ax.xaxis.label, box.width), (ax.yaxis.label, box.height)]
    return rooms


def _wrapped(text: str, room: float, font, renderer) -> str:
    """`text` with its spaces turned into line breaks where a line would grow wider than `room` pixels (a word
    wider than that alone keeps its line)."""

    def width(line: str) -> float:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0]

    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            longer = f"{line} {word}" if line else word
            if line and width(longer) > room:
                lines.append(line)
                longer = word
            line = longer
        lines.append(line)
    return "\n".join(lines)


def _varying(jobs) -> list[str]:
    return [k for k in VARYING if len({str(job.row[k]) for job in jobs}) > 1]


def _label(job, varying: list[str]) -> str:
    names = {"length": "L"}
    parts = [f"{names.get(k, k)}={job.row[k]}" for k in varying]
    return " ".join(parts) or f"job {job.row['job']}"


def _colors(labels: Iterable[str]) -> dict[str, tuple]:
    """One color per label, the same in every panel."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {label: cmap(i % 10) for i, label in enumerate(dict.fromkeys(labels))}


def _floor(values: Iterable[float | None]) -> float:
    """Where zeros are drawn on a log axis: a decade below the smallest positive value."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return 10.0 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-3


def _mark_floor(ax, floor: float, any_zero: bool) -> None:
    """The log axis starts just under `floor`; the floor line is labelled when something was drawn on it."""
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor / 3)
    if any_zero:
        ax.axhline(floor, color="0.6", linestyle=":", linewidth=1)
        ax.annotate(
            UNDERFLOW,
            (0.01, floor),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=7,
            color="0.35",
        )


def _plot_with_zeros(ax, xs: list, ys: list, floor: float, **style) -> bool:
    """Draw ys against xs on a log y axis, an exact zero at `floor` with a ▼ (at most a dozen), None or nan as gaps.
    Returns whether any zero was drawn."""
    shown = [floor if y == 0 else y if y is not None and math.isfinite(y) and y > 0 else math.nan for y in ys]
    ax.plot(xs, shown, **style)
    zeros = [x for x, y in zip(xs, ys, strict=True) if y == 0]
    zeros = zeros[:: max(1, len(zeros) // 12)]
    if zeros:
        ax.plot(
            zeros,
            [floor] * len(zeros),
            linestyle="none",
            marker="v",
            markersize=6,
            color=style.get("color"),
            markeredgecolor="black",
            markeredgewidth=0.5,
        )
    return bool(zeros)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _models(jobs) -> list[str]:
    """The models in the order of the jobs (the summary's order), one panel each."""
    return list(dict.fromkeys(str(job.row["model"]) for job in jobs)) or ["(no jobs)"]


def _legend(ax, any_zero: bool) -> None:
    """The axes' legend, the underflow marker's entry added where one was drawn, each label wrapped to fit."""
    from matplotlib.lines import Line2D

    handles, _ = ax.get_legend_handles_labels()
    if any_zero:
        handles.append(
            Line2D(
                [], [], linestyle="none", marker="v", color="0.5", markeredgecolor="black", label=UNDERFLOW
            )
        )
    if handles:  # the layout engine never shortens a legend's label (a model's name): wrapped here
        labels = [textwrap.fill(h.get_label(), LEGEND_WIDTH, break_long_words=False) for h in handles]
        ax.legend(handles=handles, labels=labels, fontsize=7)


def log_lines_with_zeros(ax, series: dict[str, list[float]]) -> None:
    """One line a series against its index on a log y axis, exact zeros on the floor (▼, UNDERFLOW in the legend)."""
    floor = _floor(v for values in series.values() for v in values)
    any_zero = False
    for i, (name, values) in enumerate(series.items()):
        xs = list(range(len(values)))
        any_zero |= _plot_with_zeros(
            ax, xs, values, floor, color=f"C{i}", label=name, marker=".", markersize=3
        )
    _mark_floor(ax, floor, any_zero)
    _legend(ax, any_zero)


def grad_by_position(jobs, path: Path) -> Path:
    """Write `path`: the sweep's grads_figure."""
    return save_figure(grads_figure(jobs), path, dpi=DPI)


def grads_figure(jobs):
    """‖∂L/∂e_t‖ by position, log scale, a panel a model, a color a length (or what else varies), solid at init,
    dashed trained."""
    models, varying = _models(jobs), _varying(jobs)
    colors = _colors(_label(job, varying) for job in jobs)
    fig, axes = _figure(len(models))
    floor = _floor(v for job in jobs for norms in job.grads.values() for v in norms)
    for ax, model in zip(axes, models, strict=True):
        drawn = any_zero = False
        for job in (j for j in jobs if str(j.row["model"]) == model):
            label = _label(job, varying)
            for when, style in (("init", "-"), ("final", "--")):
                norms = job.grads.get(when)
                if norms:
                    any_zero |= _plot_with_zeros(
                        ax,
                        list(range(len(norms))),
                        norms,
                        floor,
                        color=colors[label],
                        linestyle=style,
                        linewidth=1.2,
                        label=f"{label} {when}",
                    )
                    drawn = True
        ax.set_title(model)
        ax.set_xlabel("position t")
        if not drawn:
            _no_data(ax, "no grad_by_position in verdict.json\n(probes off, or the job failed)")
            continue
        _mark_floor(ax, floor, any_zero)
        _legend(ax, any_zero)
    axes[0].set_ylabel("‖∂L/∂e_t‖ (input gradient norm)")
    fig.suptitle("gradient of the loss at each input position (solid: init, dashed: trained)", fontsize=10)
    return fig


def reach_by_length(jobs, path: Path) -> Path:
    """Write `path`: the sweep's reach_figure."""
    return save_figure(reach_figure(jobs), path, dpi=DPI)


def reach_figure(jobs):
    """Gradient reach ‖∂L/∂e_0‖ / ‖∂L/∂e_(T-2)‖ by sequence length, log scale, a line a model (solid: init,
    dashed: trained)."""
    fig, (ax,) = _figure(1, width=5.6, height=4.0)
    models = _models(jobs)
    colors = _colors(models)
    values = [job.row[k] for job in jobs for k in ("reach_init", "reach_final")]
    floor = min(_floor(values), 1e-3)
    drawn = any_zero = False
    for model in models:
        rows = sorted(
            (j.row for j in jobs if str(j.row["model"]) == model and j.row["length"] is not None),
            key=lambda r: r["length"],
        )
        for key, style, marker in (("reach_init", "-", "o"), ("reach_final", "--", "s")):
            points = [(r["length"], r[key]) for r in rows if r[key] is not None and not math.isnan(r[key])]
            if points:
                xs, ys = zip(*points, strict=True)
                any_zero |= _plot_with_zeros(
                    ax,
                    list(xs),
                    list(ys),
                    floor,
                    color=colors[model],
                    linestyle=style,
                    marker=marker,
                    label=f"{model} {key.split('_')[1]}",
                )
                drawn = True
    ax.set_xlabel("sequence length")
    ax.set_ylabel("gradient reach ‖∂L/∂e_0‖ / ‖∂L/∂e_(T-2)‖")
    ax.set_title("how much gradient reaches the first token", fontsize=10)
    if not drawn:
        _no_data(ax, "no reach_init / reach_final in verdict.json\n(probes off, or the jobs failed)")
    else:
        ax.set_xscale("log")
        # reach 1: the first token gets as much gradient as the last
        ax.axhline(1.0, color="0.8", linewidth=1)
        _mark_floor(ax, floor, any_zero)
        _legend(ax, any_zero)
    return fig


def loss_curves(jobs, path: Path) -> Path:
    """Write `path`: the sweep's loss_figure."""
    return save_figure(loss_figure(jobs), path, dpi=DPI)


def loss_figure(jobs):
    """Training loss by step, log scale, a panel a model, a line a job, validation loss as dots."""
    models, varying = _models(jobs), _varying(jobs)
    colors = _colors(_label(job, varying) for job in jobs)
    fig, axes = _figure(len(models))
    for ax, model in zip(axes, models, strict=True):
        curves = [
            (job, [(s, v) for s, v in job.curve if v > 0]) for job in jobs if str(job.row["model"]) == model
        ]
        ax.set_title(model)
        ax.set_xlabel("step")
        if not any(points for _, points in curves):
            _no_data(ax, "no train/loss in metrics.csv\n(the jobs failed before training)")
            continue
        for job, points in curves:
            label = _label(job, varying)
            if points:
                steps, losses = zip(*points, strict=True)
                ax.plot(
                    steps, losses, color=colors[label], linewidth=1, label=f"{label} ({job.row['status']})"
                )
            val = [(s, v) for s, v in job.val_curve if v > 0]
            if val:  # validation: dots on the training curve's color
                steps, losses = zip(*val, strict=True)
                ax.plot(steps, losses, color=colors[label], linestyle="none", marker="o", markersize=4)
        ax.set_yscale("log")
        _legend(ax, any_zero=False)
    axes[0].set_ylabel("loss (line: training, dots: validation)")
    return fig
