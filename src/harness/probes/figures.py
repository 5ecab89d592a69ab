"""A run's figures, drawn by the probes: p_correct.png, embeddings.png, grad_by_position.png (a sweep's are
harness.report.plots). matplotlib is imported only to draw, on the Agg canvas directly (no pyplot), each figure
laid out to fit its canvas."""

from __future__ import annotations

from pathlib import Path

from harness.report import plots


def _agg_figure(width: float = 6.0, height: float = 4.0):
    """A matplotlib Figure on an Agg canvas, laid out when drawn (constrained: it makes room for a wrapped title or
    a long label that fixed margins would cut off, for about 0.1 s more a figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=80, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_rgb(fig):
    """The figure as a uint8 array [height, width, rgb], for TensorBoard's add_image and wandb.Image."""
    import numpy as np

    plots.wrap_labels(fig).canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def save_figure(fig, path: Path) -> Path:
    """Save `fig` as `path`, returned, its titles and labels wrapped to fit."""
    return plots.save_figure(fig, path)


def p_correct_figure(history: list[tuple[int, list[float], float, float]]):
    """p(correct) per example over steps (one line each), and the mean entropy and top-1 mass beside it."""
    fig = _agg_figure(10, 4)
    left, right = fig.subplots(1, 2)
    steps = [h[0] for h in history]
    for i in range(len(history[0][1])):
        left.plot(steps, [h[1][i] for h in history], label=f"example {i}")
    left.set(
        xlabel="step", ylabel="p(correct token)", ylim=(0, 1.02), title="probability on the right answer"
    )
    if len(history[0][1]) <= 10:
        left.legend(loc="lower right", fontsize="small")
    right.plot(steps, [h[2] for h in history], label="entropy (nats)")
    right.plot(steps, [h[3] for h in history], label="top-1 mass")
    right.set(xlabel="step", title="spread-out -> concentrated")
    right.legend(loc="center right", fontsize="small")
    return fig


def embedding_figure(coords: list[list[float]], labels: list[str], step: int, explained: list[float]):
    """The token embeddings projected on their first two principal components; tokens labelled when few."""
    fig = _agg_figure(5, 5)
    ax = fig.subplots()
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    ax.scatter(xs, ys, s=8, alpha=0.6)
    if len(labels) <= 128:  # text labels are the slow part of the drawing, and unreadable beyond this
        for x, y, label in zip(xs, ys, labels, strict=True):
            ax.annotate(label, (x, y), fontsize=7)
    ax.set(
        xlabel=f"PC 1 ({explained[0]:.0%})",
        ylabel=f"PC 2 ({explained[1]:.0%})",
        title=f"token embeddings, step {step}",
    )
    return fig


def grad_by_position_figure(series: dict[str, list[float]]):
    """‖∂L/∂e_t‖ against position t, log scale, a line per series; an underflow to 0 marked on the floor."""
    fig = _agg_figure(7, 4)
    ax = fig.subplots()
    plots.log_lines_with_zeros(ax, series)
    ax.set(xlabel="position t", ylabel="‖∂L/∂e_t‖ (log)", title="gradient of the loss by input position")
    return fig


def legend_labels(fig) -> list[str]:
    """The legend entries of a figure's axes."""
    return [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
