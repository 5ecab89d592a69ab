"""A report page's charts: `line_chart` (inline SVG of Series, Marks and Levels on a log or linear axis),
`heat_map` (one row a layer, one column a step), `stacked_bar` (shares of a whole) and `png` (an RGB PNG, by
Pillow). matplotlib stays unimported: it would double the time a page takes to rebuild."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field, replace
from html import escape

from PIL import Image

from harness.report.html import data_url, missing, number

#: one color a series, in order (the tab10 palette the run's PNGs use)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
#: most points a drawn series keeps: a bucket's lowest and highest (a spike stays visible)
BUCKETS = 300


@dataclass
class Series:
    """One curve: `points` (x, y) in x order."""

    name: str
    points: list[tuple[float, float]]
    dashed: bool = False


@dataclass
class Mark:
    """A vertical line at step `x`, labelled (a symptom where it was first seen)."""

    x: float
    label: str


@dataclass
class Level:
    """A horizontal line at `y` (the floor, the goal)."""

    y: float
    label: str


@dataclass
class Chart:
    """A line chart's frame: its size and axes."""

    title: str
    x_label: str
    y_label: str
    log_y: bool = False
    width: int = 1060
    height: int = 240
    margin: tuple[int, int, int, int] = field(default=(14, 16, 38, 64))  # top, right, bottom, left


def thinned(points: list[tuple[float, float]], buckets: int = BUCKETS) -> list[tuple[float, float]]:
    """At most 2 * `buckets` + 2 points in x order: the first, the last, and each x bucket's lowest and highest."""
    if len(points) <= 2 * buckets:
        return points
    lo, hi = points[0][0], points[-1][0]
    width = (hi - lo) / buckets or 1
    kept: dict[int, list] = {}
    for x, y in points:
        kept.setdefault(min(int((x - lo) / width), buckets - 1), []).append((x, y))
    out = {points[0], points[-1]}  # the ends: where it started, and the final value
    for bucket in kept.values():
        out |= {min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])}
    return sorted(out)


def ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Round values across [lo, hi]: decades on a log axis, 1-2-5 steps on a linear one."""
    if log:
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        every = max(1, (last - first) // 6)
        decades = [10.0**e for e in range(first, last + 1, every) if lo <= 10.0**e <= hi]
        if len(decades) >= 2:
            return decades
        return [
            t for t in ticks(lo, hi, False) if t > 0
        ]  # within a decade or two: round values, not powers of ten
    span = hi - lo or abs(hi) or 1.0
    raw = span / 5
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    return [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


@dataclass
class Frame:
    """Where a chart's values land: the plotting area inside the margins and the axes' ranges (log10 on a log axis)."""

    chart: Chart
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    @property
    def box(self) -> tuple[int, int, int, int]:
        """left, top, width, height of the plotting area."""
        top, right, bottom, left = self.chart.margin
        return left, top, self.chart.width - left - right, self.chart.height - top - bottom

    def px(self, x: float) -> float:
        left, _, w, _ = self.box
        return left + (x - self.x_lo) / (self.x_hi - self.x_lo) * w

    def py(self, y: float) -> float:
        _, top, _, h = self.box
        y = math.log10(y) if self.chart.log_y else y
        return top + (1 - (y - self.y_lo) / (self.y_hi - self.y_lo)) * h


def _is_finite_number(y) -> bool:
    return isinstance(y, (int, float)) and math.isfinite(y)


def _on_axis(y, log: bool) -> bool:
    """Whether `y` can be drawn on the axis: a finite number, above 0 on a log axis."""
    return _is_finite_number(y) and (y > 0 or not log)


def _framed(chart: Chart, xs: list[float], ys: list[float]) -> Frame:
    y_lo, y_hi = min(ys), max(ys)
    if chart.log_y:
        y_lo, y_hi = math.log10(y_lo), math.log10(y_hi)
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    return Frame(chart, min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1, y_lo, y_hi)


def grid(f: Frame) -> list[str]:
    """The frame, the y ticks as lines across it, the x ticks below it, and the axes' labels."""
    left, top, w, h = f.box
    parts = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fff" stroke="#d0d7de"/>']
    lo, hi = (10**f.y_lo, 10**f.y_hi) if f.chart.log_y else (f.y_lo, f.y_hi)
    for t in ticks(lo, hi, f.chart.log_y):
        if lo - 1e-9 * abs(lo) <= t <= hi * 1.001:
            y = f.py(t)
            parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>')
            parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{number(t, 3)}</text>')
    for t in ticks(f.x_lo, f.x_hi, False):
        parts.append(f'<text x="{f.px(t):.1f}" y="{top + h + 14}" text-anchor="middle">{number(t, 6)}</text>')
    parts.append(
        f'<text x="{left + w / 2:.0f}" y="{top + h + 27}" text-anchor="middle">{escape(f.chart.x_label)}</text>'
        f'<text transform="translate(12 {top + h / 2:.0f}) rotate(-90)" text-anchor="middle">'
        f"{escape(f.chart.y_label)}{' (log)' if f.chart.log_y else ''}</text>"
    )
    return parts


def curve(f: Frame, s: Series, color: str) -> str:
    path = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in s.points)
    dash = ' stroke-dasharray="5 3"' if s.dashed else ""
    line = f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} points="{path}"/>'
    if len(s.points) == 1:  # a single point draws no line: a dot
        x, y = s.points[0]
        line += f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="3" fill="{color}"/>'
    return line


def _level_line(f: Frame, level: Level) -> str:
    left, _, w, _ = f.box
    y = f.py(level.y)
    return (
        f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#57606a" stroke-dasharray="2 3"/>'
        f'<text x="{left + w - 4}" y="{y - 3:.1f}" text-anchor="end" fill="#57606a">{escape(level.label)}</text>'
    )


def _mark_line(f: Frame, mark: Mark) -> str:
    _, top, _, h = f.box
    x = f.px(mark.x)
    return (
        f'<g class="mark"><title>{escape(mark.label)}</title><line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" '
        f'y2="{top + h}" stroke="#cf222e" stroke-dasharray="4 2"/><text x="{x + 3:.1f}" y="{top + 11}" '
        f'fill="#cf222e">{escape(mark.label)}</text></g>'
    )


def _floor_markers(f: Frame, points: list[tuple[float, float]], color: str) -> str:
    """Values a log axis cannot show (exactly 0, an underflow: often the finding) as ▼ on the plot's floor."""
    _, top, _, h = f.box
    marks = "".join(
        f'<path d="M{f.px(x) - 3:.1f},{top + h - 6} h6 l-3,6 z" fill="{color}"><title>{number(y)} at {number(x)}'
        "</title></path>"
        for x, y in thinned(points)
    )
    return f'<g class="floor">{marks}</g>'


def line_chart(chart: Chart, series: list[Series], marks: list[Mark] = (), levels: list[Level] = ()) -> str:
    """An inline SVG of `series` with `marks` and `levels`. On a log axis a value <= 0 is a ▼ on the floor; where
    nothing is above 0 the axis is linear."""
    if chart.log_y and not any(_is_finite_number(y) and y > 0 for s in series for _, y in s.points):
        chart = replace(chart, log_y=False)
    shown = [(s, sorted((x, y) for x, y in s.points if _on_axis(y, chart.log_y))) for s in series]
    floors = [
        sorted((x, y) for x, y in s.points if chart.log_y and _is_finite_number(y) and y <= 0) for s in series
    ]
    kept = [i for i, (_, points) in enumerate(shown) if points or floors[i]]
    if not kept:
        return missing(f"{chart.title}: nothing recorded")
    levels = [lv for lv in levels if _on_axis(lv.y, chart.log_y)]
    xs = [x for i in kept for x, _ in shown[i][1] + floors[i]] + [m.x for m in marks]
    f = _framed(chart, xs, [y for _, points in shown for _, y in points] + [lv.y for lv in levels] or [1.0])
    colors = {i: PALETTE[n % len(PALETTE)] for n, i in enumerate(kept)}
    parts = grid(f)
    for i in kept:
        s, points = shown[i]
        parts += [curve(f, Series(s.name, thinned(points), s.dashed), colors[i])] if points else []
        parts += [_floor_markers(f, floors[i], colors[i])] if floors[i] else []
    parts += [_level_line(f, level) for level in levels] + [_mark_line(f, mark) for mark in marks]
    legend = " ".join(
        f'<span style="color:{colors[i]}">{"┅" if shown[i][0].dashed else "━"} {escape(shown[i][0].name)}'
        + (f" ({len(floors[i])} at 0 or below: ▼)" if floors[i] else "")
        + "</span>"
        for i in kept
    )
    return (
        f'<figure><svg class="chart" role="img" aria-label="{escape(chart.title)}" width="{chart.width}" '
        f'height="{chart.height}" viewBox="0 0 {chart.width} {chart.height}" font-size="10" '
        f'font-family="system-ui,sans-serif">{"".join(parts)}</svg>'
        f"<figcaption>{escape(chart.title)}: {legend}</figcaption></figure>"
    )


#: viridis at five stops, for the heat maps (low: dark blue, high: yellow); a cell with no value is light grey
STOPS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
NO_VALUE = (234, 238, 242)


def _viridis(t: float) -> tuple[int, int, int]:
    """The heat maps' color of `t` in [0, 1]."""
    t = min(max(t, 0.0), 1.0) * (len(STOPS) - 1)
    i = min(int(t), len(STOPS) - 2)
    f = t - i
    return tuple(round(a + (b - a) * f) for a, b in zip(STOPS[i], STOPS[i + 1], strict=True))


def png(pixels: list[list[tuple[int, int, int]]]) -> bytes:
    """An RGB PNG of `pixels` (rows of (r, g, b))."""
    # Pillow, the imaging library matplotlib draws with: importing matplotlib.image instead would add 0.2 s to a
    # page's 0.16 s rebuild (python -m harness.report), Pillow 0.02 s; a 48 x 300 map encodes in ~3 ms either way
    image = Image.frombytes(
        "RGB", (len(pixels[0]), len(pixels)), bytes(c for row in pixels for rgb in row for c in rgb)
    )
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def heat_map(title: str, names: list[str], steps: list[int], rows: list[list[float | None]]) -> str:
    """A heat map of `rows` (one a name) by `steps`, colored by log10 of the value, at most BUCKETS columns (each
    its largest value); zero or none is grey."""
    if not names or not steps:
        return missing(f"{title}: nothing recorded")
    columns = min(len(steps), BUCKETS)
    edges = [round(k * len(steps) / columns) for k in range(columns + 1)]
    cells = []
    for row in rows:
        out = []
        for a, b in zip(edges, edges[1:], strict=False):
            values = [v for v in row[a:b] if v is not None and math.isfinite(v) and v > 0]
            out.append(math.log10(max(values)) if values else None)
        cells.append(out)
    shown = [v for row in cells for v in row if v is not None]
    if not shown:
        return missing(f"{title}: every value zero or not recorded")
    lo, hi = min(shown), max(shown)
    scale = (hi - lo) or 1.0
    pixels = [[NO_VALUE if v is None else _viridis((v - lo) / scale) for v in row] for row in cells]
    names_html = "".join(f'<li title="{escape(n)}">{escape(n)}</li>' for n in names)
    legend = (
        f"steps {steps[0]} to {steps[-1]} left to right; color: log10 of the value from {lo:.2f} "
        f"(dark, {10**lo:.3g}) to {hi:.2f} (yellow, {10**hi:.3g}); grey: zero or not recorded"
    )
    return (
        f'<figure><div class="heat"><ol>{names_html}</ol><img alt="{escape(title)}" style="height:{12 * len(names)}px" '
        f'src="{data_url(png(pixels))}"></div><figcaption>{escape(title)}: {escape(legend)}</figcaption></figure>'
    )


def stacked_bar(title: str, parts: list[tuple[str, float]], width: int = 1060, height: int = 28) -> str:
    """One horizontal bar of `parts` (name, share of the whole), each as wide as its share, labelled where it
    fits; a share that is not a finite number above 0 is left out."""
    shown = [(name, share) for name, share in parts if _is_finite_number(share) and share > 0]
    whole = sum(share for _, share in shown)
    if not whole:
        return missing(f"{title}: nothing recorded")
    blocks, legend, x = [], [], 0.0
    for i, (name, share) in enumerate(shown):
        color, w = PALETTE[i % len(PALETTE)], share / whole * width
        label = f"{name} {share:.0%}"
        text = (
            f'<text x="{x + 4:.1f}" y="{height / 2 + 4:.0f}" fill="#fff">{escape(label)}</text>'
            if w > 7 * len(label)
            else ""
        )
        blocks.append(
            f'<g class="part"><title>{escape(label)}</title><rect x="{x:.1f}" y="0" width="{w:.1f}" '
            f'height="{height}" fill="{color}"/>{text}</g>'
        )
        legend.append(f'<span style="color:{color}">■ {escape(label)}</span>')
        x += w
    return (
        f'<figure><svg class="chart" role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-size="11" font-family="system-ui,sans-serif">{"".join(blocks)}</svg>'
        f"<figcaption>{escape(title)}: {' '.join(legend)}</figcaption></figure>"
    )
