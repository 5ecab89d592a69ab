"""The pieces of a report page, one self-contained HTML file that fetches nothing: `page` (the document, style and
script inline), `section`, `table` (sorted by its headers), `badge`, `missing`, `number`, `image` and `data_url`
(a PNG inside the page)."""

from __future__ import annotations

import base64
import math
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
    "CONFIG_ERROR": "#cf222e",
    "INTERRUPTED": "#8250df",
    "RANK_LOST": "#cf222e",
    "RANK_STALLED": "#cf222e",
    "MISSING": "#8250df",
}
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
document.querySelectorAll('table.sortable th').forEach(th => th.addEventListener('click', () => {
  const col = th.cellIndex;
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


def badge(status) -> str:
    status = str(status or "MISSING")
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
    """The note a page shows where a part of the run is not there."""
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


def _sort_key(value: int | float) -> str:
    """A number as the tables' script sorts it: parseFloat reads Infinity; NaN sorts with the empty cells, last."""
    if isinstance(value, int) or math.isfinite(value):
        return repr(value)
    return "" if math.isnan(value) else "-Infinity" if value < 0 else "Infinity"


def table(columns: list[str], rows: list[list], ident: str = "", row_status: list[str] | None = None) -> str:
    """A sortable table; a cell is text (escaped), ("html", markup[, sort key]) or a number (right-aligned). A row
    carries data-status where `row_status` gives one."""
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
                cells.append(f'<td class="num" data-sort="{_sort_key(value)}">{number(value)}</td>')
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
