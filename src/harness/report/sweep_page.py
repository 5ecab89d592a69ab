"""A sweep's report.html (`write_sweep_page`): the summary table, each row linked to its job's page, and the plots.
A job without a page (killed before writing one) gets one written now, so every link leads somewhere."""

from __future__ import annotations

from html import escape
from pathlib import Path
from urllib.parse import quote

from harness.report.html import badge, image, missing, page, section, table
from harness.report.run_page import PAGE, page_or_warning
from harness.report.verdict import write_atomic

#: the statuses that make a sweep's own, the worst first
WORST_FIRST = (
    *(
        "ERROR",
        "CONFIG_ERROR",
        "RANK_LOST",
        "RANK_STALLED",
        "FAIL",
        "PREFLIGHT_FAIL",
        "NONFINITE",
        "SYMPTOM",
        "INTERRUPTED",
    ),
    "MISSING",
)


def write_sweep_page(
    sweep_dir: Path, jobs: list, columns: list[str], headline: str, plots: tuple[str, ...]
) -> Path:
    """Write `sweep_dir`'s report.html: `columns` of each of `jobs` (harness.report.summary.Job), `headline` above,
    `plots` (PNG names in the sweep dir) below."""
    sweep_dir = Path(sweep_dir)
    rows, statuses = [], []
    for job in jobs:
        name = str(job.row["job"])
        if not (sweep_dir / name / PAGE).is_file():
            page_or_warning(sweep_dir / name)
        link = f'<a class="job" href="./{escape(quote(name))}/{PAGE}">{escape(name)}</a>'
        cells = []
        for key in columns:
            value = job.row.get(key)
            if key == "job":
                cells.append(("html", link))
            elif key == "status":
                cells.append(("html", badge(value), value))
            else:
                cells.append(
                    value if isinstance(value, (int, float)) else ("" if value is None else str(value))
                )
        rows.append(cells)
        statuses.append(str(job.row["status"]))
    order = list(columns)
    if "job" in order:  # the link first: the row's way to its job
        order.insert(0, order.pop(order.index("job")))
        rows = [[row[columns.index(k)] for k in order] for row in rows]
    body = table(order, rows, "summary", statuses) if rows else missing("no job dirs in this sweep")
    figures = [image(sweep_dir / name, name) for name in plots if (sweep_dir / name).is_file()]
    worst = next((s for s in WORST_FIRST if s in statuses), None)  # the sweep's badge: its worst job's
    status = worst or ("DONE" if "DONE" in statuses else "PASS" if statuses else "MISSING")
    html = page(
        f"sweep {sweep_dir.name}",
        status,
        [
            f'<h1 id="verdict">{badge(status)} Sweep {escape(sweep_dir.name)}</h1><p>{escape(headline)}</p>'
            f"<p>Sweep dir: <code>{escape(str(sweep_dir))}</code>. Click a column's header to sort by it; a job's "
            "name opens its own page.</p>",
            section("jobs", "Jobs", body),
            section("plots", "Plots", "\n".join(figures) or missing("no plots drawn")),
        ],
    )
    return write_atomic(sweep_dir / PAGE, html)
