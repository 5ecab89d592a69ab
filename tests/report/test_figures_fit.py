"""Every figure the project writes fits its canvas: each text's extent inside the figure (a sweep's three, a run's
three, with a title far wider than the canvas too), and the PNGs a real sweep and a real run write keep their
titles off the edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.report import plots
from harness.report.summary import COLUMNS, EXTRA, Job
from tests.conftest import needs_probes, train

#: a title no canvas of the project is wide enough for on one line
LONG = "a title that runs on and on, " * 6 + "far past the width of its canvas"


def outside(fig) -> list[str]:
    """Each text of `fig`, drawn, whose window extent leaves the figure's bbox (tick labels as their axis draws
    them: the ones inside the view)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer, canvas = fig.canvas.get_renderer(), fig.bbox
    axes = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    tick_labels = {
        id(text)
        for axis in axes
        for tick in axis.get_major_ticks() + axis.get_minor_ticks()
        for text in (tick.label1, tick.label2)
    }
    texts = [t for t in fig.findobj(Text) if id(t) not in tick_labels and t.get_visible() and t.get_text()]
    boxes = [(repr(t.get_text()[:60]), t.get_window_extent(renderer)) for t in texts]
    boxes += [(f"the {axis.axis_name} axis", axis.get_tightbbox(renderer)) for axis in axes]
    return [
        f"{name} at {np.round(box.extents).tolist()}, the canvas {canvas.extents.tolist()}"
        for name, box in boxes
        if box is not None
        and (
            box.x0 < canvas.x0 - 1
            or box.y0 < canvas.y0 - 1
            or box.x1 > canvas.x1 + 1
            or box.y1 > canvas.y1 + 1
        )
    ]


def inked_edge(png: Path) -> int:
    """How many pixels of the PNG's outermost frame are not background: a text cut by the edge inks it."""
    from matplotlib.image import imread

    image = imread(png)[..., :3]
    frame = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    return int((frame < 0.99).any(axis=-1).sum())


def _job(i: int, model: str = "Transformer", length: int = 10) -> Job:
    row = dict.fromkeys(COLUMNS + EXTRA)
    row.update(model=model, length=length, status="DONE", reach_init=0.5 / i, reach_final=0.0, job=str(i))
    grads = {"init": [1e-3 * (t + 1) for t in range(length)], "final": [0.0] + [1e-2] * (length - 1)}
    return Job(row=row, grads=grads, curve=[(s, 1 / (s + 1)) for s in range(30)], val_curve=[(10, 0.2)])


SWEEPS = {
    "one model": [_job(1, length=10), _job(2, length=50), _job(3, length=200)],
    "two models": [_job(1), _job(2, model="RNN", length=50)],
    "a long model name": [_job(1, model=LONG)],
}
SWEEP_FIGURES = (plots.grads_figure, plots.reach_figure, plots.loss_figure)


def _run_figures() -> dict:
    from harness.probes import figures

    history = [(s, [s / 20, 1 - s / 20, 0.5], 1.0 - s / 40, s / 20) for s in range(20)]
    coords = [[i / 10, (i % 7) / 3] for i in range(40)]
    return {
        "p_correct": figures.p_correct_figure(history),
        "embeddings": figures.embedding_figure(coords, [f"token {i}" for i in range(40)], 1200, [0.5, 0.25]),
        "grad_by_position": figures.grad_by_position_figure(
            {"init": [0.0, 1e-3, 1.0], "final": [1e-5, 1, 2]}
        ),
    }


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("draw", SWEEP_FIGURES, ids=lambda f: f.__name__)
def test_a_sweeps_figures_fit_their_canvas(draw, sweep, tmp_path):
    fig = draw(SWEEPS[sweep])
    png = plots.save_figure(fig, tmp_path / "figure.png", dpi=plots.DPI)
    assert not outside(fig), outside(fig)
    assert not inked_edge(png), f"{inked_edge(png)} pixels of {png.name}'s edge inked"


@needs_probes  # a fork without the probes draws no run figures
@pytest.mark.parametrize("name", ["p_correct", "embeddings", "grad_by_position"])
@pytest.mark.parametrize("title", ["its own", "a long one"])
def test_a_runs_figures_fit_their_canvas(name, title, tmp_path):
    from harness.probes import figures

    saved, shown = _run_figures()[name], _run_figures()[name]  # as the PNG is written; as the trackers get it
    for fig in (saved, shown) if title == "a long one" else ():  # every title and label far too long
        for ax in fig.axes:
            ax.set(title=LONG, xlabel=LONG, ylabel=LONG)
    png = figures.save_figure(saved, tmp_path / "figure.png")
    figures.to_rgb(shown)
    for fig in (saved, shown):
        assert not outside(fig), outside(fig)
    assert not inked_edge(png), f"{inked_edge(png)} pixels of {png.name}'s edge inked"


def test_the_checks_see_a_title_wider_than_its_canvas(tmp_path):
    """Planted: the sweep's suptitle, saved as it was before it wrapped (no wrap_labels)."""
    fig = plots.grads_figure(SWEEPS["one model"])
    fig.savefig(tmp_path / "cut.png", dpi=plots.DPI)
    cut = outside(fig)
    assert len(cut) == 1 and cut[0].startswith("'gradient of the loss at each input position"), cut
    assert inked_edge(tmp_path / "cut.png") > 0, "the cut title should ink the PNG's left and right edges"


@pytest.mark.slow  # a real sweep of three jobs and one run with the probes, ~20 s
@needs_probes
def test_the_pngs_a_sweep_and_a_run_write_keep_their_titles_inside(tmp_path, data_root):
    """`python train.py -m data.length=10,50,200` and one run: no PNG they write has ink on its edge."""
    quick = ("mode.max_steps=3", "preflight=false")
    sweep = train("-m", "data.length=10,50,200", *quick, cwd=tmp_path, data_root=data_root)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    run = train("data.length=12", *quick, cwd=tmp_path, data_root=data_root)
    # PASS or FAIL (3 steps may not overfit it): the figures are drawn either way
    assert run.returncode in (0, 1), run.stderr[-3000:]
    pngs = {
        f"{png.parent.name}/{png.name}": png
        for folder in ("sweep", "run")
        for png in (tmp_path / folder).glob("*.png")
    }
    assert {"sweep/grad_by_position.png", "sweep/reach.png", "sweep/loss.png"} <= set(pngs), sorted(pngs)
    assert {"run/p_correct.png", "run/embeddings.png", "run/grad_by_position.png"} <= set(pngs), sorted(pngs)
    inked = {name: inked_edge(png) for name, png in pngs.items()}
    assert not any(inked.values()), f"pixels inked on the edge: {inked}"
