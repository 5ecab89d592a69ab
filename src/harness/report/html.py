"""The pieces of a report page (harness.report.run_page, harness.report.sweep_page): one self-contained HTML file,
its style and script inline, every figure drawn here as inline SVG or a PNG in a data: URL. Nothing is fetched: the
page opens from disk, mailed, attached to a pull request or copied off a cluster. No matplotlib: a page costs
milliseconds at a run's end.

    page(title, status, sections)    the whole document
    line_chart(series, ...)          curves over steps or positions, log or linear, with marks at steps
    heat_map(names, steps, rows)     one row a layer, one column a step: a PNG drawn here, pixel per cell
    table(columns, rows)             a table whose headers sort it"""

from __future__ import annotations

import base64
import math
import struct
import zlib
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

#: the colors of the statuses, the same in every page
STATUS_COLORS = {
    "PASS": "#1a7f37",
    "DONE": "#1a7f37",
    "DEBUG": "#57606a",
    "WARN": "#9a6700",
    "SKIP": "#57606a",
    "FAIL": "#cf222e",
    "PREFLIGHT_FAIL": "#cf222e",
    "NONFINITE": "#cf222e",
    "SYMPTOM": "#bc4c00",
    "ERROR": "#cf222e",
    "INTERRUPTED": "#8250df",
    "MISSING": "#8250df",
}
#: one color a series, in order (the tab10 palette the run's PNGs use)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
#: most points a drawn series keeps: a bucket's lowest and highest (a spike stays visible)
BUCKETS = 300

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 48px;color:#1f2328}
h1{font-size:22px;margin:20px 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:16px 0 6px} .status{font-weight:700;color:#fff;padding:1px 7px;border-radius:4px}
table{border-collapse:collapse;width:100%;margin:6px 0} td,th{border:1px solid #d0d7de;padding:3px 6px;
vertical-align:top;text-align:left} th{background:#f6f8fa;cursor:pointer;white-space:nowrap}
td:first-child{white-space:nowrap} td.num{text-align:right;font-variant-numeric:tabular-nums} .detail{white-space:pre-wrap;word-break:break-word}
.next{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;border-radius:6px}
.missing{color:#57606a;font-style:italic} code,.text{font-family:ui-monospace,monospace;font-size:12px}
.text{white-space:pre-wrap;word-break:break-all} mark{background:#ffcecb;color:#82071e}
.heat{display:grid;grid-template-columns:max-content 1fr;gap:0 8px;align-items:start}
.heat ol{list-style:none;margin:0;padding:0;font:10px/12px ui-monospace,monospace;text-align:right}
.heat img{width:100%;image-rendering:pixelated;image-rendering:crisp-edges}
figure{margin:8px 0} figcaption{color:#57606a;font-size:12px} img.figure{max-width:100%}
details>summary{cursor:pointer;color:#0969da}
"""

#: sorts a table by the header clicked (numbers as numbers, empty cells last); a second click reverses
SCRIPT = """
document.querySelectorAll('table.sortable th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const down = th.dataset.order !== 'up';
  th.closest('tr').querySelectorAll('th').forEach(h => delete h.dataset.order);
  th.dataset.order = down ? 'up' : 'down';
  const key = tr => tr.cells[col].dataset.sort ?? tr.cells[col].textContent.trim();
  const rows = [...body.rows].sort((a, b) => {
    const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    if (x === '' || y === '') return (x === '') - (y === '');
    const order = isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny;
    return down ? order : -order;
  });
  rows.forEach(r => body.appendChild(r));
}));
"""


def badge(status: str | None) -> str:
    status = status or "MISSING"
    color = STATUS_COLORS.get(status, "#57606a")
    return f'<span class="status" style="background:{color}">{escape(status)}</span>'


def page(title: str, status: str | None, sections: list[str]) -> str:
    """The whole document: `sections` in order, the style and the table sorting inline."""
    return (
        f'<!DOCTYPE html>\n<html lang="en" data-status="{escape(status or "MISSING")}"><head><meta charset="utf-8">'
        f'<title>{escape(title)}</title><meta name="viewport" content="width=device-width">'
        f"<style>{STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + f"\n<script>{SCRIPT}</script></body></html>\n"
    )


def section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>\n{body}\n</section>'


def missing(what: str) -> str:
    """What a page says where a part of the run is not there to show."""
    return f'<p class="missing">{escape(what)}</p>'


def number(value, digits: int = 4) -> str:
    """A number as a cell shows it: '' for none, an exact 0 as 0, else `digits` significant digits."""
    if value is None or isinstance(value, bool):
        return "" if value is None else str(value)
    if isinstance(value, (int, float)):
        if value == 0:
            return "0"
        return str(value) if isinstance(value, int) or not math.isfinite(value) else f"{value:.{digits}g}"
    return str(value)


def table(columns: list[str], rows: list[list], ident: str = "", row_status: list[str] | None = None) -> str:
    """A sortable table; each cell is text (escaped), ("html", markup[, sort key]) or a number (right-aligned). Each row
    carries data-status where `row_status` gives one (tests and the reader's eye find the failures)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for value in row:
            if (
                isinstance(value, tuple) and value[0] == "html"
            ):  # ("html", markup) or ("html", markup, sort key)
                key = f' data-sort="{escape(str(value[2]))}"' if len(value) > 2 else ""
                cells.append(f"<td{key}>{value[1]}</td>")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td class="num" data-sort="{value!r}">{number(value)}</td>')
            else:
                cells.append(f'<td class="detail">{escape(number(value))}</td>')
        status = f' data-status="{escape(row_status[i])}"' if row_status else ""
        body.append(f"<tr{status}>{''.join(cells)}</tr>")
    ident = f' id="{ident}"' if ident else ""
    return (
        f'<table class="sortable"{ident}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def image(path: Path, caption: str) -> str:
    """A PNG of the run dir, inline (the page stays one file)."""
    return (
        f'<figure><img class="figure" alt="{escape(caption)}" src="{data_url(path.read_bytes())}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


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
    """At most 2 * `buckets` points: each bucket of x its lowest and highest point, in x order."""
    if len(points) <= 2 * buckets:
        return points
    lo, hi = points[0][0], points[-1][0]
    width = (hi - lo) / buckets or 1
    kept: dict[int, list] = {}
    for x, y in points:
        kept.setdefault(min(int((x - lo) / width), buckets - 1), []).append((x, y))
    out = []
    for bucket in kept.values():
        low, high = min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])
        out += sorted({low, high})
    return out


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
    """Where a chart's values land: the plotting area inside the margins, the axes' ranges (log10 on a log axis)."""

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

    def shows(self, y) -> bool:
        return y is not None and math.isfinite(y) and (y > 0 or not self.chart.log_y)


def framed(chart: Chart, xs: list[float], ys: list[float]) -> Frame:
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


def across(f: Frame, level: Level) -> str:
    left, _, w, _ = f.box
    y = f.py(level.y)
    return (
        f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#57606a" stroke-dasharray="2 3"/>'
        f'<text x="{left + w - 4}" y="{y - 3:.1f}" text-anchor="end" fill="#57606a">{escape(level.label)}</text>'
    )


def upright(f: Frame, mark: Mark) -> str:
    _, top, _, h = f.box
    x = f.px(mark.x)
    return (
        f'<g class="mark"><title>{escape(mark.label)}</title><line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" '
        f'y2="{top + h}" stroke="#cf222e" stroke-dasharray="4 2"/><text x="{x + 3:.1f}" y="{top + 11}" '
        f'fill="#cf222e">{escape(mark.label)}</text></g>'
    )


def line_chart(chart: Chart, series: list[Series], marks: list[Mark] = (), levels: list[Level] = ()) -> str:
    """An inline SVG of `series` (values a log axis cannot show are left out) with `marks` and `levels`."""
    probe = Frame(chart, 0, 1, 0, 1)
    lines = [
        Series(s.name, thinned([(x, y) for x, y in s.points if probe.shows(y)]), s.dashed) for s in series
    ]
    lines = [s for s in lines if s.points]
    if not lines:
        return missing(f"{chart.title}: nothing recorded")
    levels = [lv for lv in levels if probe.shows(lv.y)]
    xs = [x for s in lines for x, _ in s.points] + [m.x for m in marks]
    f = framed(chart, xs, [y for s in lines for _, y in s.points] + [lv.y for lv in levels])
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(lines))]
    parts = grid(f) + [curve(f, s, c) for s, c in zip(lines, colors, strict=True)]
    parts += [across(f, level) for level in levels] + [upright(f, mark) for mark in marks]
    legend = " ".join(
        f'<span style="color:{c}">{"┅" if s.dashed else "━"} {escape(s.name)}</span>'
        for s, c in zip(lines, colors, strict=True)
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


def color(t: float) -> tuple[int, int, int]:
    t = min(max(t, 0.0), 1.0) * (len(STOPS) - 1)
    i = min(int(t), len(STOPS) - 2)
    f = t - i
    return tuple(round(a + (b - a) * f) for a, b in zip(STOPS[i], STOPS[i + 1], strict=True))


def png(pixels: list[list[tuple[int, int, int]]]) -> bytes:
    """An RGB PNG of `pixels` (rows of (r, g, b)): the format's own few bytes, no imaging library."""
    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for rgb in row for c in rgb) for row in pixels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def heat_map(title: str, names: list[str], steps: list[int], rows: list[list[float | None]]) -> str:
    """One row a name, one column a step (at most BUCKETS columns: a bucket shows its largest value), the color
    the value's log10 between the smallest and largest positive value shown; zero or none is grey."""
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
    pixels = [[NO_VALUE if v is None else color((v - lo) / scale) for v in row] for row in cells]
    names_html = "".join(f'<li title="{escape(n)}">{escape(n)}</li>' for n in names)
    legend = (
        f"steps {steps[0]} to {steps[-1]} left to right; color: log10 of the value from {lo:.2f} "
        f"(dark, {10**lo:.3g}) to {hi:.2f} (yellow, {10**hi:.3g}); grey: zero or not recorded"
    )
    return (
        f'<figure><div class="heat"><ol>{names_html}</ol><img alt="{escape(title)}" style="height:{12 * len(names)}px" '
        f'src="{data_url(png(pixels))}"></div><figcaption>{escape(title)}: {escape(legend)}</figcaption></figure>'
    )
