"""A run's page, report.html (`write_run_page`, `page_or_warning`): the verdict in a sentence with what to do next,
the preflight, the symptoms, the curves, the datapoints and the config, all read back from the run dir's files; a
part that cannot be read says so where it would have been."""

from __future__ import annotations

import difflib
import json
import logging
import re
import shlex
import signal
from html import escape
from pathlib import Path

from harness.report.charts import Chart, Level, Mark, Series, heat_map, line_chart
from harness.report.html import badge, image, missing, number, page, section, table
from harness.report.run_files import defaults_for, flat, read_metrics, select, yaml_in
from harness.report.speed_section import run_seconds, speed_part
from harness.report.verdict import STOPPED, exit_code, verdict_in, write_atomic

log = logging.getLogger(__name__)

PAGE = "report.html"
#: what each exit code tells the shell that started the run
MEANING = {
    0: "the run did what it was asked",
    1: "the run failed (FAIL: the goal not reached; ERROR: the job could not run)",
    2: "a config or input mistake (CONFIG_ERROR): no step was trained",
    3: "the preflight failed: no step was trained",
    4: "a NaN or inf stopped training",
    5: "training showed symptoms, and probes.symptoms.fail=true makes them fail the run",
    6: "a rank of the run died (RANK_LOST): the others stopped",
    7: "a rank of the run stopped making progress (RANK_STALLED): it was ended, and the others stopped",
}
#: the statuses the preflight's rows are shown in: failures first
ROW_ORDER = {"FAIL": 0, "WARN": 1, "SKIP": 2}
#: the curves drawn, by metrics.csv column
LOSSES = {"train/loss": "training loss", "val/loss": "validation loss"}
P_CORRECT = {"logit/p_correct": "p(correct), training batch", "val/p_correct": "p(correct), validation"}
#: a parameter's series at most this many are drawn as lines; more, as a heat map
FEW = 8


def _natural_key(name: str) -> list:
    """blocks.2 before blocks.10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _per_parameter(name: str) -> bool:
    kind, _, param = name.partition("/")
    return kind in ("grad_norm", "update_ratio") and param not in ("total", "missing", "dead")


def _drawn_column(name: str) -> bool:
    return name in LOSSES or name in P_CORRECT or _per_parameter(name) or name.startswith("perf/")


def _as_list(value) -> list:
    """A verdict field that should be a list, as one whatever a fork's code wrote there."""
    return value if isinstance(value, list) else [] if value is None else [value]


def _signal_name(number) -> str:
    try:
        return signal.Signals(number).name
    except (TypeError, ValueError):
        return "a signal"


def sentence(v: dict, goal: float | None) -> str:
    """The verdict in one sentence."""
    status, steps = v.get("status"), v.get("steps")
    model = str(v.get("model") or "the model")
    if v.get("model_group") and str(v["model_group"]).lower() != model.lower():
        model += f" ({v['model_group']})"
    on = (
        f"on n={v.get('n')} {v.get('data') or ''} examples"
        if v.get("mode") == "overfit"
        else f"on {v.get('data')}"
    )
    if v.get("mode") == "eval":
        return f"{model} evaluated from {v.get('checkpoint')}: validation loss {number(v.get('val_loss'))}."
    if v.get("mode") == "doctor":
        return f"The doctor's diagnosis of {model}: {v.get('diagnosis')}."
    loss = f"final loss {number(v.get('final_loss'))}"
    took = f"{steps} steps" + (f", {number(run_seconds(v), 3)} s" if run_seconds(v) is not None else "")
    failed = [
        str(c.get("name")) for c in v.get("checks") or [] if isinstance(c, dict) and c.get("status") == "FAIL"
    ]
    symptoms = sorted(
        {str(s["name"]) for s in v.get("symptoms") or [] if isinstance(s, dict) and "name" in s}
    )
    if status == "PASS":
        return f"{model} {on} reached the goal in {took}: {loss}, goal {number(goal)}."
    if status == "FAIL":
        return f"{model} {on} did not reach the goal in {took}: {loss}, goal {number(goal)}."
    if status == "DONE":  # a run shorter than mode.val_every ends before its first validation
        val = v.get("val_loss")
        seen = "no validation ran" if val is None else f"validation loss {number(val)}"
        return f"{model} trained {took} {on}: {loss}, {seen}."
    if status == "PREFLIGHT_FAIL":
        which = f"failed {', '.join(failed)}" if failed else "failed as training started"
        return f"The preflight {which}: {model} was not trained."
    if status == "NONFINITE":
        where = v.get("nonfinite") if isinstance(v.get("nonfinite"), dict) else {}
        return (
            f"A NaN or inf reached the gradients at step {where.get('step')} in {where.get('where')}: {model} "
            "stopped before that step's update."
        )
    if status == "INTERRUPTED":
        return f"{model} {on} was stopped by {_signal_name(v.get('signal'))} after {steps} steps."
    if status in ("RANK_LOST", "RANK_STALLED"):
        return f"{model} {on} stopped after {steps} steps: {v.get('error') or 'a rank was lost'}."
    if status == "SYMPTOM":
        return f"{model} {on} trained ({took}, {v.get('judged', 'no failure')}) but showed {', '.join(symptoms)}."
    if status == "ERROR":
        return f"The job could not run: {v.get('error') or 'no cause recorded'}."
    if status == "CONFIG_ERROR":
        return f"The job did not start, its config or input refused: {v.get('error') or 'no cause recorded'}."
    return f"{model} {on}: {status}."


def next_step(v: dict, run_dir: Path, overrides: list[str]) -> str:
    """What to type or read next, where the run failed or stopped."""
    status = v.get("status")
    command = shlex.join(["python", "train.py", *overrides])
    if v.get("mode") == "doctor":
        return ""  # the diagnosis and its evidence are what to read
    if status == "FAIL":
        return (
            "Read the symptoms and the curves below. `python train.py experiment=doctor` with this run's model "
            "compares it with the simple substitute (model=rnn) and names the likelier fault."
        )
    if status == "PREFLIGHT_FAIL":
        return "Fix what each FAIL row of the preflight below names; `preflight=warn` trains all the same."
    if status == "NONFINITE":
        return (
            "Lower optim.lr, clip gradients (trainer.gradient_clip_val=1.0), or run with debug=anomaly to see "
            "the operation."
        )
    if status in STOPPED:
        last = run_dir / "checkpoints" / "last.ckpt"
        ckpt = v.get("checkpoint") or (str(last) if last.is_file() else None)
        if not ckpt:
            return f"No checkpoint was kept: start it again with `{command}`."
        return f"Resume from the checkpoint: `{command} {shlex.quote(f'ckpt_path={ckpt}')}`."
    if status == "SYMPTOM":
        return (
            "Each symptom below names a fix; probes.symptoms.fail=false reports them without failing the run."
        )
    if status == "ERROR":
        return f"The traceback is in {run_dir / 'train.log'}."
    if status == "CONFIG_ERROR":
        return "Fix the key or file the line above names and run the command again."
    return ""


def _verdict_part(v: dict | None, why: str, run_dir: Path, goal, overrides: list[str]) -> str:
    if v is None:
        why = (
            why
            or f"{run_dir / 'verdict.json'}: not written (the run has not ended, or was killed before it could)"
        )
        return f'<h1 id="verdict">{badge("MISSING")} {escape(run_dir.name)}</h1>{missing(why)}'
    try:
        code = exit_code(v)
    except (KeyError, TypeError):  # INTERRUPTED with no signal recorded
        code = None
    meaning = MEANING.get(code, "stopped by a signal (128 + its number)")
    then = next_step(v, run_dir, overrides)
    return (
        f'<h1 id="verdict">{badge(v.get("status"))} {escape(sentence(v, goal))}</h1>'
        f'<p class="exit">exit code {code if code is not None else "128 + the signal"}: {escape(meaning)}. '
        f"Run dir: <code>{escape(str(run_dir))}</code></p>"
        + (f'<p class="next">Next: {escape(then)}</p>' if then else "")
        + "".join(
            f"<p>{escape(str(line))}</p>" for line in _as_list(v.get("evidence"))
        )  # the doctor's reasons
    )


def _preflight_part(v: dict | None) -> str:
    rows = [c for c in (v or {}).get("checks") or [] if isinstance(c, dict)]
    if not rows:
        return missing(
            "no preflight rows: the preflight was off (preflight=false), or the run stopped before it"
        )
    rows = sorted(rows, key=lambda c: ROW_ORDER.get(str(c.get("status")), 3))
    cells = [
        [str(c.get("name")), ("html", badge(c.get("status"))), c.get("seconds"), str(c.get("detail", ""))]
        for c in rows
    ]
    return table(
        ["check", "status", "seconds", "detail"], cells, "preflight", [str(c.get("status")) for c in rows]
    )


def _symptoms_part(v: dict | None) -> str:
    found = [s for s in (v or {}).get("symptoms") or [] if isinstance(s, dict)]
    if not found:
        return missing("none seen")
    cells = [
        [s.get("name"), s.get("where"), s.get("step"), s.get("value"), s.get("detail"), s.get("suggestion")]
        for s in found
    ]
    return table(
        ["symptom", "where", "step", "value", "what was measured", "the fix"], cells, "symptom-table"
    )


def _per_layer(kind: str, title: str, curves: dict, y_label: str) -> str:
    names = sorted((n.partition("/")[2] for n in curves if n.startswith(kind + "/")), key=_natural_key)
    if not names:
        return missing(f"{title}: not recorded")
    series = {name: dict(curves[f"{kind}/{name}"]) for name in names}
    if len(names) <= FEW:
        lines = [Series(name, sorted(points.items())) for name, points in series.items()]
        return line_chart(Chart(title, "step", y_label, log_y=True), lines)
    steps = sorted({step for points in series.values() for step in points})
    return heat_map(title, names, steps, [[series[n].get(s) for s in steps] for n in names])


def _curves_part(v: dict | None, metrics, goal, run_dir: Path) -> str:
    curves, parts = metrics.curves, []
    if metrics.problem:
        parts.append(missing(metrics.problem))
    found = [
        s for s in (v or {}).get("symptoms") or [] if isinstance(s, dict) and isinstance(s.get("step"), int)
    ]
    found = [s for s in found if abs(s["step"]) < 2**53]  # a step an axis can place
    marks = [Mark(s["step"], s.get("name", "?")) for s in found]
    levels = []
    floor = (v or {}).get("floor")
    if isinstance(floor, (int, float)):
        levels.append(Level(floor, f"floor {number(floor)}"))
    if isinstance(goal, (int, float)):
        levels.append(Level(goal, f"goal {number(goal)}"))
    losses = [Series(label, curves.get(key, []), key == "val/loss") for key, label in LOSSES.items()]
    parts.append(line_chart(Chart("loss", "step", "loss", log_y=True), losses, marks, levels))
    p_correct = [Series(label, curves.get(key, [])) for key, label in P_CORRECT.items()]
    parts.append(line_chart(Chart("probability on the right answer", "step", "p(correct)"), p_correct, marks))
    parts.append(_per_layer("grad_norm", "gradient norm by parameter", curves, "‖grad‖"))
    parts.append(_per_layer("update_ratio", "update ratio ‖Δw‖/‖w‖ by parameter", curves, "‖Δw‖/‖w‖"))
    grads = (v or {}).get("grad_by_position") or {}
    reach = [
        Series(
            f"{when} (reach {number((v or {}).get('reach_' + when), 3)})",
            [(t, g) for t, g in enumerate(values) if isinstance(g, (int, float))],
        )
        for when, values in grads.items()
        if isinstance(values, list)
    ]
    title = "gradient reach: ‖∂L/∂input‖ by position"
    parts.append(
        line_chart(Chart(title, "position", "‖∂L/∂e_t‖", log_y=True), reach)
        if reach
        else missing(f"{title}: not recorded")
    )
    figures = sorted(p for p in run_dir.glob("*.png") if p.is_file())
    parts += [
        image(path, f"{path.name} (a figure of the run dir: the probes' and your own)") for path in figures
    ]
    return "\n".join(parts)


def marked(target: str, prediction: str) -> str:
    """`prediction` as HTML, each position where it differs from `target` marked (the masked '·' never is)."""
    if len(target) == len(prediction):
        return "".join(
            escape(p) if t == p or t == "·" else f"<mark>{escape(p)}</mark>"
            for t, p in zip(target, prediction, strict=True)
        )
    out = []
    for op, _, _, j1, j2 in difflib.SequenceMatcher(a=target, b=prediction, autojunk=False).get_opcodes():
        text = escape(prediction[j1:j2])
        out.append(text if op == "equal" else f"<mark>{text}</mark>")
    return "".join(out)


def _datapoints_part(path: Path) -> str:
    if not path.is_file():
        return missing(
            f"{path.name}: not written (probes.datapoints off, or the run stopped before its first dump)"
        )
    rows, bad = [], 0
    try:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
                bad += 1
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
    except OSError as err:
        return missing(f"{path.name}: cannot be read ({err})")
    damaged = [missing(f"{bad} line(s) of {path.name} not JSON, left out")] if bad else []
    if not rows:
        return "\n".join([missing(f"{path.name}: no rows"), *damaged])
    steps, parts = sorted({r["step"] for r in rows}), damaged
    for step in dict.fromkeys((steps[0], steps[-1])):
        cells = []
        for r in (r for r in rows if r["step"] == step):
            target, prediction = str(r.get("target", "")), str(r.get("prediction", ""))
            cells.append(
                [
                    str(r.get("split", "")),
                    r.get("index"),
                    ("html", f'<span class="text">{escape(str(r.get("input", "")))}</span>'),
                    ("html", f'<span class="text">{escape(target)}</span>'),
                    ("html", f'<span class="text">{marked(target, prediction)}</span>'),
                    r.get("loss"),
                ]
            )
        parts.append(
            f"<h3>step {step}</h3>"
            + table(["split", "example", "input", "target", "prediction", "loss"], cells)
        )
    return "\n".join(parts)


def _config_part(cfg, why: str, overrides: list[str], defaults: dict[str, str] | None) -> str:
    if cfg is None:
        return missing(why or ".hydra/config.yaml: not written")
    values = flat(cfg)
    given = f"<p>Command line: <code>{escape(shlex.join(['python', 'train.py', *overrides]))}</code></p>"
    if defaults is None:
        changed = missing("the defaults could not be composed here: the whole config is below")
    else:
        rows = [
            [k, v, defaults.get(k, "(not in the defaults)")]
            for k, v in values.items()
            if defaults.get(k) != v
        ]
        rows += [[k, "(not in this run)", v] for k, v in defaults.items() if k not in values]
        changed = (
            table(["key", "this run", "default"], rows, "config-changed")
            if rows
            else missing("every key at its default")
        )
    every_key = table(["key", "value"], [[k, v] for k, v in values.items()])
    return f"{given}{changed}<details><summary>the whole config ({len(values)} keys)</summary>{every_key}</details>"


def _part_or_note(what: str, part, *args) -> str:
    """`part(*args)`, or a note where it raised: a value no reader expected costs that part only."""
    try:
        return part(*args)
    except Exception as err:
        return missing(f"{what}: could not be drawn ({type(err).__name__}: {err})")


def write_run_page(run_dir: Path, defaults: bool = True) -> Path:
    """Write `run_dir`'s report.html from whatever the run left; `defaults`: compose conf/ to find changed keys."""
    run_dir = Path(run_dir)
    v, why = verdict_in(run_dir)
    (cfg, bad_cfg), (hydra, _) = (
        yaml_in(run_dir / ".hydra/config.yaml"),
        yaml_in(run_dir / ".hydra/hydra.yaml"),
    )
    given, _ = yaml_in(run_dir / ".hydra/overrides.yaml", listed=True)
    overrides = [str(o) for o in given or []]
    target, floor = select(cfg, "mode.target_loss"), (v or {}).get("floor")
    goal = floor + target if isinstance(floor, (int, float)) and isinstance(target, (int, float)) else None
    metrics = read_metrics(run_dir / "metrics.csv", _drawn_column, sampled=_per_parameter)
    known = None
    if defaults and cfg is not None:  # no override: the config is the defaults, no composing needed
        known = defaults_for(hydra) if overrides else flat(cfg)
    sections = [
        _part_or_note("the verdict", _verdict_part, v, why, run_dir, goal, overrides),
        section("preflight", "Preflight", _part_or_note("the preflight", _preflight_part, v)),
        section("symptoms", "Symptoms", _part_or_note("the symptoms", _symptoms_part, v)),
        section("curves", "Curves", _part_or_note("the curves", _curves_part, v, metrics, goal, run_dir)),
        section("speed", "Speed", _part_or_note("the speed", speed_part, v, metrics.curves)),
        section(
            "datapoints",
            "Datapoints",
            _part_or_note("the datapoints", _datapoints_part, run_dir / "datapoints.jsonl"),
        ),
        section(
            "config", "Config", _part_or_note("the config", _config_part, cfg, bad_cfg, overrides, known)
        ),
    ]
    status = (v or {}).get("status")
    return write_atomic(run_dir / PAGE, page(f"{status or 'MISSING'}: {run_dir.name}", status, sections))


def page_or_warning(run_dir: Path) -> Path | None:
    """Write `run_dir`'s report.html; a failure is a warning and a signal is only noted (the exit code stands)."""
    from harness.signals import Noted

    try:
        with Noted():
            path = write_run_page(run_dir)
    except Exception as err:  # the verdict is written already: a page is not worth losing the exit code for
        log.warning("report.html not written: %s: %s", type(err).__name__, err)
        return None
    log.info("page: %s", path)
    return path
