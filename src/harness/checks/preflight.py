"""run_preflight: the preflight tests through pytest for one run's model, data and config, and their table."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from pathlib import Path

import pytest
import torch
from pytorch_lightning.utilities.seed import isolate_rng

from harness.checks.at_start.after_sharding import meta_device_row
from harness.checks.data.batch_format import sample_rows
from harness.checks.data.reads import DataReads
from harness.checks.result import FAIL, CheckResult
from harness.data.batch import training_mode
from harness.signals import SIGNALS, Interrupted
from harness.train.distributed.sharding import on_meta_device

log = logging.getLogger(__name__)

#: parameters below which the checks run on one thread
SMALL = 5_000_000
#: the preflight's time in forward-and-backward passes over its batch, about: 4 to 8 measured on the built-in
#: models (4.7 for the transformer with its loop twins at length 64, a 1-minute preflight)
PASSES = 6
#: a preflight expected to take longer than this many seconds is announced first, with its estimate
ANNOUNCE_S = 20.0
#: pytest as the checks need it, no more (about 0.8 s of every run's start): nothing cached, printed or collected
#: after the session; and, for the harness's own checks alone (LEAN), none of the plugins other installed packages
#: register and no assert rewriting (they report through `record`). A fork's test files get pytest as usual.
OWN_SESSION = [
    *("-p", "no:cacheprovider", "-p", "no:terminal", "-p", "no:warnings"),
    *("-p", "no:unraisableexception", "-p", "no:threadexception"),
]
LEAN = ["--disable-plugin-autoload", "--assert=plain"]
#: the harness's own preflight tests (a fork's test files are those `preflight_tests` adds)
BUILT_IN = "preflight_tests.py"


class PreflightPlugin:
    """A pytest plugin: this run's objects as the preflight tests' fixtures, and the rows they record."""

    def __init__(self, model, data, cfg):
        # overfit mode wraps the fork's datamodule (`.base`): its loaders are what the data checks must read
        self._model, self._data, self._cfg = model, getattr(data, "base", data), cfg
        self._batch = None
        self.reads = DataReads(self._data, cfg)
        self.results: list[CheckResult] = []
        self._recorded: set[str] = set()
        self._test_of: list[str | None] = []  # the pytest node of each result, None for a file's row
        self._seconds: dict[str, float] = {}  # set-up, call and tear-down of each node

    def add(self, result: CheckResult, nodeid: str | None) -> None:
        self.results.append(result)
        self._test_of.append(nodeid)
        if nodeid is not None:
            self._recorded.add(nodeid)

    def rows(self) -> list[dict]:
        """The results as dicts, each with the seconds its test took."""
        return [
            # the first test to run a pass over the shared batch takes its time; those after it are quick
            {**result.as_dict(), "seconds": round(self._seconds.get(nodeid, 0.0), 3)}
            for result, nodeid in zip(self.results, self._test_of, strict=True)
        ]

    # the fixtures the preflight tests ask for by name
    model = pytest.fixture(name="model")(lambda self: self._model)
    data = pytest.fixture(name="data")(lambda self: self._data)
    data_reads = pytest.fixture(name="data_reads")(lambda self: self.reads)
    cfg = pytest.fixture(name="cfg")(lambda self: self._cfg)
    batch = pytest.fixture(name="batch")(lambda self: self.shared_batch())

    def shared_batch(self):
        """The sample batch every model check runs on, from the fork's own datamodule (overfit mode too)."""
        if self._batch is None:  # several examples even at n=1: the model checks compare examples
            self._batch = sample_rows(self._data, size=4)
        return self._batch

    @pytest.fixture
    def record(self, request):
        def record(result: CheckResult) -> CheckResult:
            self.add(result, request.node.nodeid)
            return result

        return record

    def pytest_runtest_logreport(self, report):
        self._seconds[report.nodeid] = self._seconds.get(report.nodeid, 0.0) + report.duration
        # a test that failed or crashed before recording a result still gets a row
        if report.failed and report.nodeid not in self._recorded:
            self.add(CheckResult(_check_name(report.nodeid), FAIL, _crash_detail(report)), report.nodeid)

    def pytest_collection_modifyitems(self, items):
        """A SKIP row for each fork test of a model still on the meta device (no weights before sharding)."""
        if not on_meta_device(
            self._model
        ):  # the built-in checks say it themselves, not as a crash read as FAIL
            return
        for item in items:
            if "model" in getattr(item, "fixturenames", ()) and item.path.name != BUILT_IN:
                self.add(meta_device_row(_check_name(item.nodeid)), item.nodeid)
                item.add_marker(pytest.mark.skip(reason="the model is on the meta device"))

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        # a test file that cannot be imported would otherwise drop its checks without a word; the
        # collector, not the report, knows the file (a file outside the rootdir has an empty node id)
        report = yield
        if report.failed:
            message = (
                str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "could not be collected"
            )
            self.add(CheckResult(collector.path.name, FAIL, message), None)
        return report


def _check_name(nodeid: str) -> str:
    """A preflight test's row name: the check it runs (`test_data[loss_mask]` -> `loss_mask`), else the test's."""
    test = nodeid.split("::")[-1]
    return test[test.index("[") + 1 : -1] if test.endswith("]") and "[" in test else test


def _crash_detail(report) -> str:
    """A test that raised before recording a row: the exception and where, in one line."""
    found = getattr(report.longrepr, "reprcrash", None)
    if found is None:
        return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"
    return f"raised {found.message.splitlines()[0][:300]} (at {Path(found.path).name}:{found.lineno}): a bug in the check or in the code it ran"


def _results_table(rows: list[dict]) -> str:
    width = max((len(r["name"]) for r in rows), default=5)
    lines = [f"{'check':<{width}}  status  seconds  detail"] + [
        f"{r['name']:<{width}}  {r['status']:<6}  {r.get('seconds', 0.0):>7.2f}  {r['detail']}" for r in rows
    ]
    return "\n".join(lines)


def _preflight_files(cfg) -> list[str]:
    """The built-in preflight tests, then the files `preflight_tests` adds (paths relative to the working
    directory)."""
    # harness.tasks.validate has made sure each exists: pytest would skip a missing one
    extra = [str(Path(p)) for p in cfg.get("preflight_tests", None) or []]
    return [str(Path(__file__).with_name(BUILT_IN)), *extra]


@contextlib.contextmanager
def _signals_end_the_session():
    """While pytest runs the checks, a signal's Interrupted reaches pytest as a KeyboardInterrupt, which ends
    its session; yields the list it is kept in, to raise again."""
    # any other exception is that check's failure, and pytest goes on to the next (minutes, at a long length)
    caught: list[Interrupted] = []
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}

    def handle(signum, frame):
        try:
            previous[signum](signum, frame)
        except Interrupted as stop:
            caught.append(stop)
            raise KeyboardInterrupt from stop

    for signum, handler in previous.items():
        if callable(handler):  # the default action (or ignoring) is left as it is
            signal.signal(signum, handle)
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _pass_seconds(model, batch: dict) -> float:
    """Seconds one forward and backward pass over `batch` takes: the unit the preflight's time is counted in."""
    started = time.perf_counter()
    model(batch["input_ids"]).float().logsumexp(dim=-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def announce(model, batch: dict) -> float:
    """The preflight's seconds, estimated from one pass over its batch, and warned of up front when long."""
    one = _pass_seconds(model, batch)
    seconds = PASSES * one
    if seconds > ANNOUNCE_S:  # a very long sequence, the loop twins: minutes without a word read as a hang
        examples, tokens = batch["input_ids"].shape
        log.warning(
            "preflight: about %.0f s ahead (%d passes over %d examples of %d tokens, %.1f s each); "
            "preflight=false skips it, preflight=warn trains whatever it finds",
            seconds,
            PASSES,
            examples,
            tokens,
            one,
        )
    return seconds


def run_preflight(module, data, cfg) -> list[dict]:
    """Run every preflight test on `module.model` and `data`; print the table; return the results as dicts."""
    if cfg.preflight is False:
        log.info("preflight skipped (preflight=false)")
        return []
    started = time.perf_counter()
    files = _preflight_files(cfg)
    plugin = PreflightPlugin(module.model, data, cfg)
    model = module.model
    threads = torch.get_num_threads()
    # a small model's tensors are tiny: more threads only spin, and on a busy CPU 100x slower
    if sum(p.numel() for p in model.parameters()) < SMALL:
        torch.set_num_threads(1)
    arguments = [*OWN_SESSION, *([] if cfg.get("preflight_tests") else LEAN)]
    # a file that fails to import is a FAIL row, and the other files' checks still run
    arguments += [
        "--continue-on-collection-errors",
        "--rootdir",
        str(Path(__file__).parent),
        "-c",
        "/dev/null",
    ]
    try:
        # the checks draw and seed: training starts as if they never ran (isolate_rng puts the generators back
        # on leaving, not past an exception: one out of here ends the run); whatever the checks switch, the model
        # ends as it began
        with isolate_rng(), training_mode(model, model.training):
            batch = plugin.shared_batch()
            # a batch no model can run is said by the data rows, not by a crash here; a model on the meta
            # device has nothing to run yet
            if batch.unusable is None and not on_meta_device(model):
                announce(model, batch)
            with _signals_end_the_session() as caught:
                code = pytest.main([*files, *arguments], plugins=[plugin])
    finally:
        torch.set_num_threads(threads)
        plugin.reads.close()  # the workers of the fork's loaders the data checks read
    model.zero_grad(set_to_none=True)
    if caught:  # a signal ended the checks (harness.signals): the run stops with its verdict
        raise caught[0]
    if code == pytest.ExitCode.INTERRUPTED:  # pytest catches a Ctrl-C and returns: pass it on
        raise KeyboardInterrupt
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):  # the checks did not all run
        plugin.add(CheckResult("preflight", FAIL, f"pytest stopped with {code.name} over {files}"), None)
    rows = plugin.rows()
    log.info("preflight (%.1f s):\n%s", time.perf_counter() - started, _results_table(rows))
    return rows
