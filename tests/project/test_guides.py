"""The examples of docs/extending.md work as the guide says: each extension point, run for real.

One train.py subprocess (a fork's model and preflight check through the command line); everything else
in-process through harness.tasks.training.run and the real classes, which is the same code without the start-up."""

from __future__ import annotations

import csv
import gc
import json
import re
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from pytorch_lightning.loggers import CSVLogger

from examples.checks import eval_deterministic
from examples.dataset import ALPHABET, MotifData, convert, label, read_raw
from examples.loss import FocalLoss
from examples.model import ConvLM
from examples.probe import LogitScale
from examples.twin import CausalConv
from harness import checks
from harness.checks import FAIL, PASS
from harness.config import groups
from harness.config.declare import check_declared
from harness.data import FolderDataModule
from harness.errors import ConfigError
from harness.ops import Twin, max_difference, registered
from harness.tasks.training import build, run
from harness.train.module import HarnessModule
from tests.conftest import CONF, PROBES_OFF, needs_probes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SEARCHPATH = (
    f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"  # the guide's conf files, as if copied into conf/
)
PREFLIGHT = f"+preflight_tests=[{EXAMPLES / 'preflight.py'}]"  # absolute: the runs below start elsewhere
QUICK = ("n=2", *PROBES_OFF)


def rows(verdict: dict) -> dict[str, dict]:
    return {c["name"]: c for c in verdict["checks"]}


class AlwaysOnDropout(ConvLM):
    """A planted bug: dropout that ignores eval mode. The built-in checks re-seed, so only the
    example check, which does not, can see it."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.dropout(super().forward(input_ids), p=0.5, training=True)


# (a) + (d) through the command line: the fork's model, with the fork's preflight check


@pytest.mark.slow  # a whole train.py run of the fork's model: ~12 s (in-process twins of it stay in make test)
def test_own_model_and_check_pass_through_train_py(run_train, tmp_path):
    done = run_train("model=rnn", "model._target_=examples.model.ConvLM", PREFLIGHT, *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["status"] == "PASS", verdict
    found = rows(verdict)
    assert found["eval_deterministic"]["status"] == PASS, found
    assert not [c for c in verdict["checks"] if c["status"] == FAIL], verdict["checks"]
    # the run found the example twin by itself: the model's module imported it. Counted here among the
    # package's and the examples' twins only: other tests may define their own in this process
    ours = [cls for cls in registered() if cls.__module__.split(".")[0] in ("harness", "examples")]
    assert CausalConv in ours and found["twins"]["detail"].startswith(f"{len(ours)} twins agree"), found[
        "twins"
    ]


# (a) the conf-file route and the contract's loud failures


def test_own_model_conf_file(make_config):
    cfg = make_config(SEARCHPATH, "model=conv", *QUICK, "preflight=false")
    assert cfg.model._target_ == "examples.model.ConvLM" and "vocab_size" not in cfg.model
    verdict = run(cfg)
    assert (
        verdict["status"] == "PASS" and verdict["model"] == "ConvLM" and verdict["model_group"] == "conv"
    ), verdict


def test_own_conf_folder_passes_the_command_line_check():
    """train.py checks every override before anything runs: with hydra.searchpath the guide's conf folder
    (outside conf/) is looked in there too, and without it the option does not exist."""
    from harness.cli.overrides import check_overrides

    check_overrides([SEARCHPATH, "model=conv", "n=1"], ROOT / "conf")
    with pytest.raises(SystemExit) as stop:
        check_overrides(["model=conv", "n=1"], ROOT / "conf")
    assert stop.value.code == 2


@pytest.mark.parametrize(
    ("override", "key"), [("+model.dimension=3", "model.dimension"), ("model.kernel=0", "model")]
)
def test_own_model_refuses_bad_keys(override, key, make_config):
    cfg = make_config(SEARCHPATH, "model=conv", override)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build(cfg.model, "model", vocab_size=len(ALPHABET))


def test_own_model_runs_either_twin_version():
    torch.manual_seed(0)
    fast = ConvLM(len(ALPHABET), d_model=8, layers=2, kernel=3, vectorize=True)
    slow = ConvLM(len(ALPHABET), d_model=8, layers=2, kernel=3, vectorize=False)
    slow.load_state_dict(fast.state_dict())
    ids = torch.randint(0, len(ALPHABET), (2, 9))
    assert max_difference(fast(ids), slow(ids)) < 1e-5


# (b) real files in the one format, and their synthetic twin


def test_own_data_real_files_train(make_config, tmp_path):
    folder = convert(EXAMPLES / "data" / "motifs.tsv", tmp_path / "motifs")
    data = FolderDataModule(path=str(folder), length=16)
    data.prepare_data()
    data.setup()
    assert data.tokenizer.alphabet == ALPHABET
    assert len(data.train_dataset) + len(data.val_dataset) == len(read_raw(EXAMPLES / "data" / "motifs.tsv"))
    verdict = run(make_config("data=folder", f"data.path={folder}", "data.length=16", "model=rnn", *QUICK))
    assert verdict["status"] == "PASS", verdict
    assert rows(verdict)["data_roundtrip"]["status"] == PASS, verdict["checks"]


def test_own_data_synthetic_counterpart_matches_the_real_format(make_config, data_root, tmp_path):
    twin = MotifData(length=24, size=40, val_size=8, root=str(data_root))
    twin.prepare_data()
    # the twin writes what the real loader reads, with the real data's vocabulary
    as_folder = FolderDataModule(path=str(twin.dataset_dir), length=24)
    as_folder.prepare_data()
    as_folder.setup()
    assert as_folder.tokenizer.alphabet == ALPHABET
    records = [as_folder.train_dataset.record(i) for i in range(len(as_folder.train_dataset))]
    assert all(r["label"] == label(r["text"]) for r in records)
    assert {r["label"] for r in records} == {"n", "y"}, "both classes occur"
    verdict = run(
        make_config(
            SEARCHPATH,
            "data=motifs",
            "data.length=24",
            "model=rnn",
            *QUICK,
            "preflight=false",
            run_dir=tmp_path / "twin",
        )
    )
    assert verdict["status"] == "PASS" and verdict["data"] == "motifs", verdict


def test_own_data_bad_raw_line_is_named(tmp_path):
    raw = tmp_path / "raw.tsv"
    raw.write_text("ACGTACGT\tn\nACGUACGT\ty\n")
    with pytest.raises(ValueError, match=r"raw\.tsv:2: expected"):
        read_raw(raw)


# (c) a twin: registered by being a subclass, compared by the tests that discover twins


def test_own_twin_is_discovered_and_compared():
    from tests.ops.test_twins import TWINS  # the list the equivalence tests are parametrized over

    assert CausalConv in TWINS, "tests/conftest.py imports examples.twin, so the twin tests compare it"
    assert checks.twins().status == PASS


def test_own_twin_with_a_planted_bug_fails_the_check():
    class OffByOneConv(CausalConv):
        """BUG: the vectorized version pads one position too few, so tap k meets x[t - k + 1]."""

        def vectorized(self, x, weight):
            return super().vectorized(torch.roll(x, shifts=-1, dims=1), weight)

    try:
        result = checks.twins()
        assert result.status == FAIL and "OffByOneConv" in result.detail, result
    finally:
        del OffByOneConv
        gc.collect()
    assert "OffByOneConv" not in [cls.__name__ for cls in registered()], "the planted twin leaked"


# (d) a preflight check: it fails on the bug it is for, and the hook refuses a missing or broken file


def test_own_check_unit():
    torch.manual_seed(0)
    batch = {"input_ids": torch.randint(0, len(ALPHABET), (3, 10))}
    assert eval_deterministic(ConvLM(len(ALPHABET)), batch).status == PASS
    assert eval_deterministic(AlwaysOnDropout(len(ALPHABET)), batch).status == FAIL


def test_own_check_stops_a_run_with_a_planted_bug(make_config):
    verdict = run(make_config("model=rnn", f"model._target_={__name__}.AlwaysOnDropout", PREFLIGHT, *QUICK))
    assert verdict["status"] == "PREFLIGHT_FAIL", verdict
    failed = [c["name"] for c in verdict["checks"] if c["status"] == FAIL]
    # global_rng sees the draw from the global generator; the fork's check sees the randomness itself
    assert failed == ["global_rng", "eval_deterministic"], verdict["checks"]
    assert "training=self.training" in rows(verdict)["eval_deterministic"]["detail"]


def test_missing_preflight_file_is_a_config_error(make_config):
    with pytest.raises(ConfigError, match=r"preflight_tests=.*no such file"):
        run(make_config("+preflight_tests=[examples/no_such_file.py]", *QUICK, "model=rnn"))


def test_preflight_file_that_cannot_import_is_a_fail(make_config, tmp_path):
    broken = tmp_path / "preflight_broken.py"
    broken.write_text("from examples.checks import no_such_check\n")
    verdict = run(make_config(f"+preflight_tests=[{broken}]", *QUICK, "model=rnn"))
    assert verdict["status"] == "PREFLIGHT_FAIL", verdict
    found = rows(verdict)
    assert "preflight_broken.py" in found and found["preflight_broken.py"]["status"] == FAIL, verdict[
        "checks"
    ]
    assert "no_such_check" in found["preflight_broken.py"]["detail"]
    assert found["gradient_flow"]["status"] == PASS, "the other files' checks still ran"


def test_a_bare_assert_in_a_forks_file_fails_with_its_values(make_config, tmp_path):
    """pytest rewrites a fork's asserts, as in any pytest run: the row says what the values were."""
    mine = tmp_path / "preflight_width.py"
    mine.write_text(
        "def test_width(model):\n    width = sum(p.numel() for p in model.parameters())\n    assert width == 3\n"
    )
    verdict = run(make_config(f"+preflight_tests=[{mine}]", *QUICK, "model=rnn"))
    row = rows(verdict)["test_width"]
    assert row["status"] == FAIL and re.search(r"assert \d+ == 3", row["detail"]), row


# (e) a probe: a Lightning Callback logging through the run's logger, only on its steps


def test_own_probe_logs_through_the_logger(data_root, tmp_path):
    torch.manual_seed(0)
    data = MotifData(length=16, size=8, val_size=4, batch_size=4, root=str(data_root))
    data.prepare_data()
    data.setup()
    probe = LogitScale(every=2)
    trainer = pl.Trainer(
        max_steps=6,
        callbacks=[probe],
        logger=CSVLogger(tmp_path, name="", version=""),
        log_every_n_steps=1,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(HarnessModule(ConvLM(data.tokenizer.vocab_size, d_model=16)), datamodule=data)
    with open(tmp_path / "metrics.csv") as f:
        logged = [float(r["logit/max_abs"]) for r in csv.DictReader(f) if r.get("logit/max_abs")]
    assert len(logged) == 3 and all(v > 0 for v in logged), logged  # steps 2, 4, 6 of 6
    assert probe.verdict_items()["logit_max_abs"] == pytest.approx(logged[-1])


@needs_probes
def test_own_probe_runs_in_every_run_through_probes_extra(make_config, tmp_path):
    cfg = make_config(
        "n=1",
        "preflight=false",
        "probes.plots=false",
        "+probes.extra.scale={_target_: examples.probe.LogitScale, every: 2}",
    )
    verdict = run(cfg)
    with open(tmp_path / "run" / "metrics.csv") as f:
        logged = [float(r["logit/max_abs"]) for r in csv.DictReader(f) if r.get("logit/max_abs")]
    assert verdict["status"] == "PASS" and logged, verdict
    assert verdict["logit_max_abs"] == pytest.approx(logged[-1])  # its verdict_items() reached verdict.json
    with pytest.raises(ConfigError, match=r"probes\.extra\.scale.*not a pytorch_lightning Callback"):
        run(
            make_config(
                "n=1",
                "preflight=false",
                "+probes.extra.scale={_target_: examples.model.ConvLM, vocab_size: 4}",
                run_dir=tmp_path / "bad",
            )
        )


def test_own_loss_trains_and_is_checked(make_config, tmp_path):
    """Focal loss, given by config: the run trains on it and the preflight checks it (its rows name no fault)."""
    import math

    cfg = make_config(
        "n=1", "mode.target_loss=0.05", *PROBES_OFF, "loss._target_=examples.loss.FocalLoss", "+loss.gamma=2"
    )
    verdict = run(cfg)
    assert verdict["status"] == "PASS" and all(c["status"] == PASS for c in verdict["checks"]), verdict[
        "checks"
    ]
    logits, targets = torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.long)
    focal = FocalLoss(gamma=2)(logits, targets, torch.ones(1, 1, dtype=torch.bool))
    assert focal.item() == pytest.approx((1 - 0.25) ** 2 * math.log(4))  # at a uniform prediction


# the guide itself: every file and test it names exists, so it cannot point at something removed


def test_guide_names_only_what_exists():
    guide = (ROOT / "docs" / "extending.md").read_text()
    paths = set(re.findall(r"\bexamples/[\w/]+\.\w+", guide))
    named = re.findall(r"`(test_\w+)`", guide)
    tests = {name for name in named if not hasattr(Twin, name)}  # test_shapes is a Twin attribute, not a test
    assert paths and tests, "the guide names its examples and their tests"
    assert not [p for p in paths if not (ROOT / p).is_file()], paths
    defined = set(re.findall(r"^def (test_\w+)", Path(__file__).read_text(), flags=re.MULTILINE))
    assert tests <= defined, tests - defined


# -- (a) a fork's model declares its keys once ------------------------------------------------------------------


@pytest.fixture
def conv_declared(monkeypatch, tmp_path):
    """conf/ plus a model=conv yaml that names its declaration, examples/model_keys.py listed in DECLARING."""
    monkeypatch.setitem(groups.DECLARING, "examples.model_keys", ("model",))
    groups.register(ConfigStore.instance())
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "conv.yaml").write_text(
        "# a causal conv LM\ndefaults:\n  - conv_schema\n  - _self_\n"
    )
    return [f"hydra.searchpath=[file://{tmp_path}]", "model=conv"]


def _composed(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_a_fork_s_model_declares_its_keys_once_as_the_built_ins_do(conv_declared):
    cfg = _composed(conv_declared)
    assert cfg.model._target_ == "examples.model.ConvLM" and (cfg.model.kernel, cfg.model.d_model) == (4, 64)
    check_declared(cfg)  # its own defaults are in range
    with pytest.raises(ConfigError, match=r"^model\.kernel=0: must be >= 1; taps of each causal convolution"):
        check_declared(_composed([*conv_declared, "model.kernel=0"]))
    with pytest.raises(Exception, match="kernel"):  # the type, refused by Hydra as it composes
        _composed([*conv_declared, "model.kernel=abc"])
    assert _composed([*conv_declared, "+model.extra=1"]).model.extra == 1  # a new key still takes a +
