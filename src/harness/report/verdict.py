"""verdict.json, a run's machine-readable result (docs/contracts.md): the `Verdict`, its writers
(`write_verdict`, `write_atomic`), its one reader (`verdict_in`, `status_in`, `read_verdict`) and each status's
exit code (EXIT_CODES, `exit_code`)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

#: a verdict's exit code (a single run exits with it); INTERRUPTED exits 128 + the signal's number (130 SIGINT,
#: 143 SIGTERM, 140 SIGUSR2); a config or input mistake found at the door exits 2 before any run dir exists
#: (harness.errors.die), one found as the run builds its parts is its CONFIG_ERROR verdict
EXIT_CODES = {
    "PASS": 0,
    "DONE": 0,
    "DEBUG": 0,
    "FAIL": 1,
    "ERROR": 1,
    "CONFIG_ERROR": 2,
    "PREFLIGHT_FAIL": 3,
    "NONFINITE": 4,
    "SYMPTOM": 5,
    "RANK_LOST": 6,
    "RANK_STALLED": 7,
}


def exit_code(verdict: dict) -> int:
    """The exit code of a run that ended with `verdict` (EXIT_CODES)."""
    if verdict["status"] == "INTERRUPTED":
        return 128 + verdict["signal"]
    return EXIT_CODES.get(verdict["status"], 1)


#: a run stopped part-way (a signal, a rank lost or stalled): started again in its own run dir, a mode=full run
#: continues from its last.ckpt there (harness.train.checkpoints.interrupted_here)
STOPPED = ("INTERRUPTED", "RANK_LOST", "RANK_STALLED")

#: keys written only when they hold something: what one kind of ending adds
WHEN_SET = ("signal", "checkpoint", "nonfinite", "error", "lost", "resume")


@dataclass
class Verdict:
    """One run's outcome: `status` (a key of EXIT_CODES, or INTERRUPTED) and its numbers; `items`: what the probes
    add (grad_by_position, reach_init, ...), written at the top level."""

    status: str | None = None
    mode: str | None = None
    n: int | None = None  # overfit mode: the examples memorized
    model: str | None = None  # the model's class, e.g. LlamaForCausalLM
    model_group: str | None = None  # its config option, e.g. hf
    data: str | None = None
    length: int | None = None
    rule: str | None = None
    seed: int | None = None
    final_loss: float | None = None  # the last training step's loss
    floor: float | None = None  # overfit mode: the lowest loss every correct causal model can reach
    steps: int | None = None
    seconds: float | None = None
    accuracy: float | None = None  # eval mode: on the n examples (overfit), the validation split (full)
    p_correct: float | None = None
    val_loss: float | None = None
    checks: list[dict] = field(default_factory=list)  # the preflight's rows
    preflight_seconds: float | None = None
    run_dir: str | None = None
    eval_loss: float | None = None  # overfit mode: the n examples in eval mode
    eval_accuracy: float | None = None
    train_accuracy: float | None = None  # overfit mode: the n examples in train mode, re-seeded as a step
    eval_gap: str | None = None  # what a far worse eval mode means, when it is
    signal: int | None = None  # INTERRUPTED: the signal's number
    checkpoint: str | None = None  # INTERRUPTED, RANK_LOST, RANK_STALLED: where the run can resume from
    resume: str | None = None  # RANK_LOST, RANK_STALLED: the command that resumes it
    lost: dict | None = (
        None  # RANK_LOST, RANK_STALLED: {ranks: [{rank, what, pid, host, step, phase, where}], seen_by}
    )
    nonfinite: dict | None = None  # NONFINITE: {step, where}
    error: str | None = None  # ERROR, CONFIG_ERROR: why
    items: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        plain = {k: v for k, v in asdict(self).items() if k != "items" and not (k in WHEN_SET and v is None)}
        return {**plain, **self.items}

    @classmethod
    def from_dict(cls, values: dict) -> Verdict:
        known = {f.name for f in fields(cls)} - {"items"}
        return cls(
            **{k: v for k, v in values.items() if k in known},
            items={k: v for k, v in values.items() if k not in known},
        )

    def write(self, run_dir: Path) -> Path:
        return write_verdict(run_dir, self.as_dict())


#: the kinds each field of verdict.json may hold (besides null); a number may also be "nan" or "inf" as written
KINDS = {
    **dict.fromkeys(("n", "length", "seed", "steps", "signal"), (int,)),
    **dict.fromkeys(
        ("final_loss", "floor", "seconds", "accuracy", "p_correct", "val_loss", "preflight_seconds")
        + ("eval_loss", "eval_accuracy", "train_accuracy", "reach_init", "reach_final"),
        (int, float, str),
    ),
    **dict.fromkeys(
        (
            "status",
            "mode",
            "model",
            "model_group",
            "data",
            "rule",
            "run_dir",
            "eval_gap",
            "checkpoint",
            "resume",
            "error",
        ),
        (str,),
    ),
    "checks": (list,),
    "nonfinite": (dict,),
    "lost": (dict,),
    "symptoms": (list,),
    "grad_by_position": (dict,),
}


def _verdict_shape(values) -> str | None:
    """What is wrong with a parsed verdict.json's shape (not an object, a field of the wrong kind, a symptom
    without a name), or None."""
    if not isinstance(values, dict):
        return f"holds a JSON {type(values).__name__}, not an object"
    for key, kinds in KINDS.items():
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            return f"{key} is {type(value).__name__} {str(value)[:40]!r}, not {' or '.join(k.__name__ for k in kinds)}"
    if not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in values.get("symptoms") or []):
        return "symptoms must be a list of objects with a name"
    grads = values.get("grad_by_position") or {}
    if not all(isinstance(v, list) for v in grads.values()):
        return "grad_by_position must map init and final to lists of numbers"
    return None


def _plain(value):
    """`value` JSON-safe: NaN and inf as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically: a reader never sees half a file, a failed write leaves nothing."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        staging.write_text(text, encoding="utf-8")
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return path


def write_verdict(run_dir: Path, verdict: dict) -> Path:
    """Write `run_dir/verdict.json` whole (write_atomic)."""
    return write_atomic(Path(run_dir) / "verdict.json", json.dumps(_plain(verdict), indent=2) + "\n")


def parsed(run_dir: Path) -> tuple[object, str]:
    """(`run_dir`/verdict.json parsed, whatever its shape, ""), (None, why) where it cannot be, (None, "") where
    there is none."""
    path = Path(run_dir) / "verdict.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")), ""
    except FileNotFoundError:
        return None, ""
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return None, f"{path}: not valid JSON ({err})"
    except OSError as err:
        return None, f"{path}: cannot be read ({err.strerror or err})"


def verdict_in(run_dir: Path) -> tuple[dict | None, str]:
    """(`run_dir`/verdict.json, ""), (None, why) where it is damaged or not a verdict, (None, "") where there is
    none."""
    values, why = parsed(run_dir)
    wrong = None if values is None else _verdict_shape(values)
    if wrong is not None:
        return None, f"{Path(run_dir) / 'verdict.json'}: not a verdict ({wrong})"
    return values, why


def status_in(run_dir: Path) -> str | None:
    """The status of the run that ended in `run_dir`, `?` where it cannot be read, None where none ended there
    (whatever shape a fork's probe gave the other fields)."""
    values, why = parsed(run_dir)
    if values is None:
        return "?" if why else None
    status = values.get("status") if isinstance(values, dict) else None
    return status if isinstance(status, str) else "?"


def read_verdict(run_dir: Path) -> dict:
    """`run_dir`/verdict.json; ValueError where it cannot be read, FileNotFoundError where there is none."""
    values, why = verdict_in(run_dir)
    if values is None:
        if not why:
            raise FileNotFoundError(Path(run_dir) / "verdict.json")
        raise ValueError(why)
    return values
