"""The run's and the sweep's page (report.html), read as files: what each part shows, built from run dirs written
here with the shapes a run leaves (tests/cli/test_cli.py reads a real run's page; tests/report/test_report_browser.py
opens real runs' pages in a real browser)."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from harness.report.__main__ import main as report_main
from harness.report.charts import BUCKETS, NO_VALUE, STOPS, _viridis, heat_map, png, thinned
from harness.report.run_page import PAGE, marked, sentence, write_run_page
from harness.report.summary import write_summary

CHECKS = [
    {"name": "gradient_flow", "status": "PASS", "detail": "all 30 tensors get a gradient", "seconds": 0.01},
    {
        "name": "split_overlap",
        "status": "WARN",
        "detail": "3% of validation examples found in training",
        "seconds": 0.1,
    },
    {
        "name": "causality",
        "status": "FAIL",
        "detail": "output 3 moves when input 7 changes " + "x" * 600,
        "seconds": 0.02,
    },
    {"name": "twins", "status": "SKIP", "detail": "no twins registered", "seconds": 0.0},
]
SYMPTOM = {
    "name": "loss_spike",
    "step": 30,
    "where": "train/loss",
    "value": 9.5,
    "detail": "x10",
    "suggestion": "clip",
}


def run_dir(tmp_path: Path, params: int = 12, **verdict) -> Path:
    """A run dir as a run leaves it: verdict.json, metrics.csv (one row a metric kind, as Lightning's CSVLogger
    writes), datapoints.jsonl, .hydra/."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    values = {
        "status": "FAIL",
        "mode": "overfit",
        "n": 2,
        "model": "GPT",
        "model_group": "gpt",
        "data": "synthetic",
        "steps": 60,
        "seconds": 3.2,
        "final_loss": 0.5,
        "floor": 0.1,
        "checks": CHECKS,
        "symptoms": [SYMPTOM],
        "grad_by_position": {"init": [1.0, 0.5, 0.0], "final": [0.2, 0.1, 0.05]},
        **verdict,
    }
    (run / "verdict.json").write_text(json.dumps(values))
    names = [f"blocks.{i}.weight" for i in range(params)]
    header = ["step", "train/loss", "val/loss", "logit/p_correct"] + [f"grad_norm/{n}" for n in names]
    header += [f"update_ratio/{n}" for n in names] + ["grad_norm/total"]
    with open(run / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        for step in range(60):
            writer.writerow({"step": step, "train/loss": 3.0 / (step + 1), "logit/p_correct": step / 60})
            writer.writerow({"step": step, **{f"grad_norm/{n}": 0.1 * (i + 1) for i, n in enumerate(names)}})
            if step % 10 == 0:
                writer.writerow({"step": step, "val/loss": 3.1 / (step + 1)})
                writer.writerow({"step": step, **{f"update_ratio/{n}": 1e-3 for n in names}})
    rows = [
        {
            "step": s,
            "split": "train",
            "index": 0,
            "input": "abcd",
            "target": "··xy",
            "prediction": p,
            "loss": 1.0,
        }
        for s, p in ((0, "··qy"), (20, "··xz"), (40, "··xy"))
    ]
    (run / "datapoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / ".hydra" / "config.yaml").write_text(
        "seed: 0\nn: 2\nmode:\n  name: overfit\n  target_loss: 0.02\n"
    )
    (run / ".hydra" / "overrides.yaml").write_text("- n=2\n- model=gpt\n")
    return run


def statuses(html: str, table: str) -> list[str]:
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr data-status="([A-Z_]+)"', body)


def test_a_run_page_puts_the_verdict_first_then_the_failed_checks_whole(tmp_path):
    html = write_run_page(run_dir(tmp_path)).read_text()
    assert html.index('id="verdict"') < html.index('id="preflight"') < html.index('id="symptoms"')
    head = html.split('id="preflight"', 1)[0]
    assert ">FAIL</span>" in head and "did not reach the goal in 60 steps" in head and "goal 0.12" in head
    assert "exit code 1" in head and 'class="next"' in head  # what to do next, where it failed
    assert statuses(html, "preflight") == ["FAIL", "WARN", "SKIP", "PASS"]
    assert "x" * 600 in html  # each detail whole
    assert '<html lang="en" data-status="FAIL"' in html


def test_the_curves_mark_the_symptoms_and_many_layers_are_a_heat_map(tmp_path):
    html = write_run_page(run_dir(tmp_path, params=12)).read_text()
    curves = html.split('id="curves"', 1)[1].split("</section>", 1)[0]
    assert (
        '<g class="mark"><title>loss_spike</title>' in curves
        and "goal 0.12" in curves
        and "floor 0.1" in curves
    )
    assert curves.count('<img alt="gradient norm by parameter"') == 1  # 12 parameters: a heat map
    assert 'title="total"' not in curves and 'title="blocks.11.weight"' in curves  # parameters only
    assert "clip" in html.split('id="symptoms"', 1)[1].split("</section>", 1)[0]  # the fix
    few = write_run_page(run_dir(tmp_path / "few", params=3)).read_text()
    assert 'alt="gradient norm by parameter"' not in few and 'aria-label="gradient norm by parameter"' in few


def test_the_datapoints_show_the_first_and_last_steps_with_the_wrong_tokens_marked(tmp_path):
    html = write_run_page(run_dir(tmp_path)).read_text()
    part = html.split('id="datapoints"', 1)[1].split("</section>", 1)[0]
    assert "<h3>step 0</h3>" in part and "<h3>step 40</h3>" in part and "<h3>step 20</h3>" not in part
    first, last = part.split("<h3>step 40</h3>")
    assert "··<mark>q</mark>y" in first and "<mark>" not in last  # step 40 predicts every token right
    assert marked("··xy", "··ab") == "··<mark>a</mark><mark>b</mark>"
    assert marked("hello", "help") == "hel<mark>p</mark>"  # tokens of another width: the differing span


def test_the_config_lists_the_keys_that_differ_from_the_defaults_first(tmp_path):
    run = run_dir(tmp_path)
    hydra = {
        "hydra": {
            "job": {"config_name": "train"},
            "runtime": {
                "config_sources": [
                    {"path": str(Path(__file__).parents[2] / "conf"), "schema": "file", "provider": "main"}
                ]
            },
        }
    }
    (run / ".hydra" / "hydra.yaml").write_text(json.dumps(hydra))
    (run / ".hydra" / "config.yaml").write_text(
        "seed: 7\nn: 2\nmode:\n  name: overfit\n  target_loss: 0.02\n"
    )
    part = write_run_page(run).read_text().split('id="config"', 1)[1]
    changed = part.split('id="config-changed"', 1)[1].split("</table>", 1)[0]
    assert re.search(r"<td[^>]*>seed</td><td[^>]*>7</td><td[^>]*>0</td>", changed)
    assert ">n<" not in changed  # n=2 is the default
    assert "python train.py n=2 model=gpt" in part


def test_bad_input_is_one_line_or_a_page_that_says_what_is_missing(tmp_path, capsys):
    for bad in (tmp_path / "nope", tmp_path):  # no such folder; a folder that is no run and no sweep
        assert report_main([str(bad)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:"), lines
    run = run_dir(tmp_path)
    (run / "verdict.json").write_text('{"status": "PASS", "steps": ')
    (run / "metrics.csv").write_bytes(b"step,train/loss\n1,0.5\n\xff\xfe\x00garbage")
    (run / ".hydra" / "config.yaml").write_text("seed: [unclosed")
    (run / "datapoints.jsonl").write_text('{"step": 0, "split"\n')
    assert report_main([str(run)]) == 0
    html = (run / PAGE).read_text()
    assert "not valid JSON" in html and "MISSING" in html
    assert "metrics.csv: cannot be read (UnicodeDecodeError" in html
    assert "config.yaml: not readable YAML (" in html and "not JSON, left out" in html
    (run / "verdict.json").write_text('{"status": "PASS", "checks": "not a list"}')
    (run / "metrics.csv").write_text("nothing,here\n1,2\n")
    assert report_main([str(run)]) == 0
    html = (run / PAGE).read_text()
    assert "not a verdict (checks is str" in html and "metrics.csv: no header with a step column" in html


def test_a_sweep_page_links_every_job_to_its_page_and_shows_a_missing_one(tmp_path):
    sweep = tmp_path / "sweep"
    for job, status in (("0", "PASS"), ("1", "INTERRUPTED"), ("2", None)):
        run = run_dir(sweep / "made" / job)
        run.rename(sweep / job)
        if status is None:
            (sweep / job / "verdict.json").unlink()  # killed before it could write one
        else:
            (sweep / job / "verdict.json").write_text(
                json.dumps({"status": status, "steps": 5, "signal": 15})
            )
    html = write_summary(sweep, plots=False)["html"].read_text()
    links = re.findall(r'<a class="job" href="([^"]+)">', html)
    assert links == ["./0/report.html", "./1/report.html", "./2/report.html"]
    assert all((sweep / link).is_file() for link in links)  # a job without a page got one
    assert statuses(html, "summary") == ["PASS", "INTERRUPTED", "MISSING"]
    assert "MISSING" in (sweep / "2" / PAGE).read_text()


def test_a_long_curve_is_thinned_keeping_its_spikes():
    points = [(step, 1.0) for step in range(20_000)]
    points[12_345] = (12_345, 1e6)
    kept = thinned(points)
    assert len(kept) <= 602 and (12_345, 1e6) in kept and kept == sorted(kept)
    assert kept[0] == (0, 1.0) and kept[-1] == (19_999, 1.0)  # the curve's ends


def _decoded(img_tag_and_after: str) -> Image.Image:
    """The picture of the first <img>'s data: URL in `img_tag_and_after`."""
    source = re.search(r'src="data:image/png;base64,([^"]+)"', img_tag_and_after).group(1)
    return Image.open(io.BytesIO(base64.b64decode(source)))


def test_the_heat_maps_png_reads_back_with_an_imaging_library():
    pixels = [[(r * 40, c * 20, 7) for c in range(9)] for r in range(5)]
    image = Image.open(io.BytesIO(png(pixels)))
    assert image.size == (9, 5) and image.mode == "RGB"
    assert [image.getpixel((c, r)) for r in range(5) for c in range(9)] == [p for row in pixels for p in row]


def test_the_pages_heat_map_decodes_to_one_row_a_parameter_colored_by_its_value(tmp_path):
    """The real page's image: 12 parameters by 60 steps, parameter i's gradient norm 0.1 * (i + 1) at every step."""
    html = write_run_page(run_dir(tmp_path, params=12)).read_text()
    image = _decoded(html.split('<img alt="gradient norm by parameter"', 1)[1])
    assert image.size == (60, 12) and image.mode == "RGB"
    rows = [[image.getpixel((c, r)) for c in range(60)] for r in range(12)]
    assert all(len(set(row)) == 1 for row in rows), "one value a parameter: one color a row"
    assert rows[0][0] == STOPS[0] and rows[-1][0] == STOPS[-1]  # the smallest dark, the largest yellow
    lo, hi = math.log10(0.1), math.log10(1.2)
    expected = [_viridis((math.log10(0.1 * (i + 1)) - lo) / (hi - lo)) for i in range(12)]
    assert [row[0] for row in rows] == expected


def test_a_heat_map_cell_of_zero_or_no_value_is_grey_and_each_column_keeps_its_largest():
    rows = [[1.0, None, 100.0, 10.0], [0.0, 10.0, 10.0, 10.0]]
    image = _decoded(heat_map("g", ["a", "b"], [0, 1, 2, 3], rows))
    assert [[image.getpixel((c, r)) for c in range(4)] for r in range(2)] == [
        [STOPS[0], NO_VALUE, STOPS[-1], _viridis(0.5)],
        [NO_VALUE, _viridis(0.5), _viridis(0.5), _viridis(0.5)],
    ]
    wide = _decoded(heat_map("g", ["a"], list(range(600)), [[1.0] * 599 + [100.0]]))
    assert wide.size == (BUCKETS, 1) and wide.getpixel((BUCKETS - 1, 0)) == STOPS[-1]


def test_every_picture_the_readme_and_docs_show_is_there():
    """The README's page screenshot and every other image the guides show (taken again by `make screenshots`)."""
    root = Path(__file__).resolve().parents[2]
    shown = []
    for guide in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", guide.read_text()):
            shown.append(target)
            assert (guide.parent / target).is_file(), f"{guide.name} shows {target}, which is not there"
    assert "docs/img/run_pass_view.png" in shown


BASE = {"model": "GPT", "model_group": "gpt", "mode": "overfit", "n": 2, "data": "synthetic", "steps": 9}


@pytest.mark.parametrize(
    ("values", "phrase"),
    [
        ({"status": "PASS", "final_loss": 0.01}, "reached the goal in 9 steps"),
        ({"status": "DONE", "mode": "full", "val_loss": 1.5}, "validation loss 1.5"),
        ({"status": "NONFINITE", "nonfinite": {"step": 4, "where": "blocks.0"}}, "at step 4 in blocks.0"),
        ({"status": "INTERRUPTED", "signal": 2}, "stopped by SIGINT after 9 steps"),
        (
            {"status": "RANK_LOST", "error": "RANK_LOST after step 9: rank 1 pid 7 killed by SIGKILL"},
            "stopped after 9 steps: RANK_LOST after step 9: rank 1 pid 7 killed by SIGKILL",
        ),
        ({"status": "SYMPTOM", "symptoms": [{"name": "dead_units"}], "judged": "PASS"}, "showed dead_units"),
        ({"status": "ERROR", "error": "no such file"}, "could not run: no such file"),
        (
            {"status": "DONE", "mode": "eval", "checkpoint": "a.ckpt", "val_loss": 2.0},
            "evaluated from a.ckpt",
        ),
        (
            {"status": "FAIL", "mode": "doctor", "diagnosis": "model broken"},
            "diagnosis of GPT: model broken",
        ),
    ],
)
def test_the_verdict_sentence_of_each_kind_of_ending(values, phrase):
    assert phrase in sentence({**BASE, **values}, goal=0.02)


def test_a_page_that_fails_or_is_signalled_leaves_the_run_as_it_ended(tmp_path, monkeypatch, caplog):
    """The page comes after the verdict: a write that fails is a warning, a signal meanwhile only noted; nothing
    escapes the job's record (whose caller exits with the verdict's code)."""
    import os
    import signal
    import time

    import harness.report.run_page as run_page
    from harness.signals import SignalGate
    from harness.tasks.job import recorded

    run = run_dir(tmp_path)

    def broken(run_dir):
        raise OSError("disk full")

    monkeypatch.setattr(run_page, "write_run_page", broken)
    with recorded(run, sweeping=False) as record:
        record.verdict = {"status": "FAIL"}
    assert "report.html not written: OSError: disk full" in caplog.text

    def signalled(run_dir):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here
        return broken(run_dir)

    monkeypatch.setattr(run_page, "write_run_page", signalled)
    gate = SignalGate()
    gate.install()
    try:
        with recorded(run, sweeping=False) as record:
            record.verdict = {"status": "FAIL"}
    finally:
        gate.restore()
    assert gate.received == signal.SIGTERM and record.verdict == {"status": "FAIL"}


@pytest.mark.parametrize(
    "damage",
    [
        {"checks": [{"status": "FAIL"}, {"name": 3, "status": ["FAIL"]}]},  # a row with no name, odd types
        {"status": "INTERRUPTED", "signal": 999, "evidence": 5, "mode": "overfit"},  # no n, no such signal
        {"symptoms": [{"name": "loss_spike", "step": 10**400}]},  # a step no axis can hold
    ],
)
def test_verdict_fields_of_odd_shapes_cost_one_part_of_the_page_at_most(damage, tmp_path):
    run = run_dir(tmp_path)
    values = json.loads((run / "verdict.json").read_text())
    values.update(damage)
    values.pop("n", None)
    (run / "verdict.json").write_text(json.dumps(values))
    with open(run / "metrics.csv", "a") as f:
        f.write("inf,1.0\n1e400,2.0\n")  # steps no int holds
    (run / "datapoints.jsonl").write_text("[" * 100_000 + "\n")
    (run / "odd.png").mkdir()  # a folder named like a figure
    assert report_main([str(run)]) == 0
    html = (run / PAGE).read_text()
    assert html.count("could not be drawn") <= 1 and 'id="config"' in html and "not JSON, left out" in html
