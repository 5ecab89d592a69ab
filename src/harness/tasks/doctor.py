"""The experiment=doctor task, `doctor`: the overfit ladder (real train.py runs) for the model, the simple
substitute and the loop twins, then one diagnosis (`diagnose`; docs/workflow.md lists them) with its evidence in
doctor.json. The verdict is PASS when the model is healthy, else FAIL."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.report.summary import verdict_of
from harness.report.verdict import Verdict

log = logging.getLogger(__name__)

#: symptom names -> what they say about a model that memorizes one example but not five
OPTIMIZATION = {
    "no_progress": "the learning rate is too low (optim.lr)",
    "update_ratio": "the learning rate is off (optim.lr): see the update ratio's direction",
    "loss_spike": "the learning rate is too high (optim.lr), or warmup is missing",
    "divergence": "the learning rate is far too high (optim.lr): the loss climbs and stays up",
    "exploding_gradients": "the gradients explode: a lower learning rate, clipping, a smaller init",
    "vanishing_gradients": "the gradients vanish before the first layers: residuals, normalization, a gated cell",
    "saturated_activations": "saturated tanh/sigmoid layers pass no gradient: scale their inputs down",
    "dead_units": "dead ReLU units pass no gradient: lower the learning rate, check biases",
    "nonfinite": "a NaN or inf stopped the run: a lower learning rate, clipping, or debug=anomaly to find it",
    "dead_params": "parameters get no gradient: see which, and why they are cut off from the loss",
}


@dataclass
class Rung:
    """One overfit run of the doctor's: who (`label`), on `n` examples, its command and verdict."""

    label: str
    n: int
    command: list[str]
    verdict: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.verdict.get("status", "ERROR")

    @property
    def passed(self) -> bool:
        return self.status in ("PASS", "SYMPTOM")


def _own_overrides() -> list[str]:
    """This run's command-line overrides, less those the doctor sets for each of its runs."""
    dropped = ("experiment", "n", "mode", "hydra.run.dir", "hydra.sweep.dir")
    keys = [(o, o.split("=")[0].lstrip("+~")) for o in HydraConfig.get().overrides.task]
    return [o for o, key in keys if key not in dropped and key.split(".")[0] != "doctor"]


#: the groups whose overrides are the model's own: the substitute trains with its defaults instead
MODEL_OWN = ("model", "optim", "schedule")


def substitute_overrides(overrides: list[str], substitute: str) -> list[str]:
    """`overrides` less the model's own groups (MODEL_OWN: a learning rate suits one model), choosing `substitute`."""
    kept = [o for o in overrides if o.split("=")[0].lstrip("+~").split(".")[0] not in MODEL_OWN]
    return [*kept, f"model={substitute}"]


def _entry_point() -> str:
    """The train.py beside the config directory this run was composed from."""
    main = next(s for s in HydraConfig.get().runtime.config_sources if s.provider == "main")
    return str(Path(main.path.removeprefix("file://")).parent / "train.py")


def _command_text(command: list[str]) -> str:
    """`command` as one types it: `python train.py ...`, train.py relative to this folder where it lies below it."""
    script = Path(command[1])
    if script.is_relative_to(Path.cwd()):
        script = script.relative_to(Path.cwd())
    return shlex.join(["python", str(script), *command[2:]])


def _run_rung(label: str, n: int, overrides: list[str], run_dir: Path, timeout: float) -> Rung:
    """One `python train.py mode=overfit n=N ...` in `run_dir/<label>_n<N>`, its verdict read back."""
    where = run_dir / f"{label}_n{n}"
    command = [sys.executable, _entry_point(), "mode=overfit", f"n={n}", *overrides, f"hydra.run.dir={where}"]
    rung = Rung(label, n, command)
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
        verdict, unread = verdict_of(where)
        rung.verdict = (
            verdict.as_dict()
            if verdict.status
            else {"status": "ERROR", "error": _no_verdict_reason(done, unread)}
        )
    except subprocess.TimeoutExpired:
        rung.verdict = {"status": "ERROR", "error": f"no verdict within doctor.timeout={timeout:.0f} s"}
    log.info("%-12s n=%d  %-14s %s", label, n, rung.status, _command_text(command))
    return rung


def _no_verdict_reason(done: subprocess.CompletedProcess, unread: str | None) -> str:
    """Why a run left no verdict: its exit code and the line of its output that says why."""
    lines = [line for line in done.stderr.splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    reason = next(
        (line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else unread
    )
    return f"exit {done.returncode}: {(reason or 'no output')[:300]}"


def doctor(cfg: DictConfig, run_dir: Path) -> dict:
    """The doctor task: the runs, the diagnosis, doctor.json and the verdict; returns the verdict as a dict."""
    started = time.perf_counter()
    settings = cfg.doctor
    model_group = HydraConfig.get().runtime.choices.get("model")
    base = _own_overrides()
    rungs = [_run_rung("model", n, base, run_dir, settings.timeout) for n in settings.ladder]
    if model_group != settings.substitute:
        sub = substitute_overrides(base, settings.substitute)
        rungs += [_run_rung(settings.substitute, n, sub, run_dir, settings.timeout) for n in settings.ladder]
    if settings.loop_twins and "vectorize" in cfg.model:  # the first rung the model failed, else its first
        again = next((r for r in rungs if r.label == "model" and not r.passed), rungs[0])
        loop = [*base, "model.vectorize=false"]
        rungs.append(_run_rung("model_loops", again.n, loop, run_dir, settings.timeout))
    diagnosis, evidence = diagnose(rungs, settings.substitute)
    report = {
        "diagnosis": diagnosis,
        "evidence": evidence,
        "runs": [
            {"who": r.label, "n": r.n, "status": r.status, "command": _command_text(r.command)} for r in rungs
        ],
    }
    (run_dir / "doctor.json").write_text(json.dumps(report, indent=2) + "\n")
    _print_report(report)
    verdict = Verdict(
        status="PASS" if diagnosis == "healthy" else "FAIL",
        mode="doctor",
        model=rungs[0].verdict.get("model"),
        model_group=model_group,
        data=HydraConfig.get().runtime.choices.get("data"),
        seed=cfg.seed,
        run_dir=str(run_dir),
        seconds=round(time.perf_counter() - started, 3),
        items={"diagnosis": diagnosis, "evidence": evidence, "runs": report["runs"]},
    )
    verdict.write(run_dir)
    return verdict.as_dict()


# harness or data broken: the substitute fails too; model broken: only the model fails, from its first rung;
# vectorization broken: it passes with the loop twins only; capacity or optimization: it memorizes n=1 but not
# more (its symptoms say which); healthy: every rung passes
def diagnose(rungs: list[Rung], substitute: str) -> tuple[str, list[str]]:
    """(diagnosis, evidence lines) from the runs' verdicts."""
    model = [r for r in rungs if r.label == "model"]
    other = {r.n: r for r in rungs if r.label == substitute}
    loops = next((r for r in rungs if r.label == "model_loops"), None)
    evidence = [f"{r.label} n={r.n}: {r.status}{_outcome_words(r)}" for r in rungs]
    failed = next((r for r in model if not r.passed), None)
    if failed is None:
        if not all(r.passed for r in other.values()):
            evidence.append(
                f"the substitute ({substitute}) fails where the model does not: its capacity, not yours"
            )
        return "healthy", evidence
    if failed.n in other and not other[failed.n].passed:
        evidence.append(
            f"the substitute ({substitute}) fails n={failed.n} too on the same data: suspect the data or the harness"
        )
        return "harness or data broken", evidence
    if loops is not None and loops.n == failed.n and loops.passed:
        evidence.append(f"with the loop twins the model passes n={loops.n}: a vectorized op is wrong")
        return "vectorization broken", evidence
    if failed is model[0]:
        evidence.append(f"only the model fails, from n={failed.n}, where the substitute passes")
        return "model broken", evidence + _warnings_of(failed)
    names = sorted({s["name"] for s in failed.verdict.get("symptoms", [])})
    causes = [f"optimization: {name}: {OPTIMIZATION[name]}" for name in names if name in OPTIMIZATION]
    if failed.status in ("ERROR", "CONFIG_ERROR"):
        causes = [f"the run at n={failed.n} could not finish: {failed.verdict.get('error')}"]
    if not causes:
        causes = [f"capacity: no symptom at n={failed.n}; a larger model or more steps (mode.max_steps)"]
    evidence.append(f"the model memorizes n={model[0].n} but not n={failed.n}")
    return "capacity or optimization", evidence + causes


def _outcome_words(rung: Rung) -> str:
    """A rung's verdict in a few words: its error, or its steps, final loss and symptoms."""
    v = rung.verdict
    if v.get("error"):
        return f" ({v['error']})"
    loss = v.get("final_loss")
    parts = [f"{v.get('steps')} steps"] + ([f"final loss {loss:.4g}"] if isinstance(loss, float) else [])
    parts += [f"symptom {s['name']} in {s['where']}" for s in v.get("symptoms", [])[:3]]
    return f" ({', '.join(parts)})"


def _warnings_of(rung: Rung) -> list[str]:
    """The preflight rows that did not PASS and the symptoms of a failed run, one line each."""
    rows = [
        f"preflight {c['name']}: {c['status']} {c.get('detail', '')}" for c in rung.verdict.get("checks", [])
    ]
    rows = [r for r in rows if ": PASS " not in r]
    return rows + [
        f"symptom {s['name']} in {s['where']}: {s['detail']}" for s in rung.verdict.get("symptoms", [])
    ]


def _print_report(report: dict) -> None:
    log.info("doctor: %s", report["diagnosis"].upper())
    for line in report["evidence"]:
        log.info("  %s", line)
    log.info("the runs (each in its own folder of this run dir):")
    for run in report["runs"]:
        log.info("  %s", run["command"])
