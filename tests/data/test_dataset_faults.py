"""A dataset folder whose checksums match but whose content is wrong is refused in one short line naming the folder
and the fault; a generated cache that cannot be read is made again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.errors import ConfigError
from tests.conftest import PROBES_OFF

GOOD = [
    json.dumps({"text": "abab", "label": "1"}).encode(),
    json.dumps({"text": "baba", "label": "0"}).encode(),
]
META = {"format": 1, "task": "classify", "alphabet": "ab01", "length": 4, "source": {}}


def write_folder(
    folder: Path, train: list[bytes], meta: dict | None = None, raw_meta: str | None = None
) -> Path:
    """A dataset folder holding exactly these train lines (and a good val split), its checksums matching them:
    whatever is wrong is in the content, not a truncation."""
    folder.mkdir(parents=True)
    splits = {}
    for name, lines in (("train", train), ("val", GOOD[:1])):
        data = b"".join(line + b"\n" for line in lines)
        (folder / f"{name}.jsonl").write_bytes(data)
        splits[name] = {"examples": len(lines), "sha256": hashlib.sha256(data).hexdigest()}
    text = raw_meta if raw_meta is not None else json.dumps({**META, "splits": splits, **(meta or {})})
    (folder / "meta.json").write_text(text)
    return folder


HUGE = json.dumps({"text": "a" * 5_000_000, "label": "1"}).encode()
FAULTS = {
    "meta_a_list": ([], "[1, 2]", "meta.json: holds a JSON list, not an object"),
    "meta_without_alphabet": ([], None, "meta.json: alphabet must be"),
    "line_not_json": ([GOOD[0], b'{"text": "abab", '], None, "train.jsonl line 2: not JSON"),
    "record_without_text": (
        [b'{"label": "1"}'],
        None,
        'train.jsonl line 1: not a record with a "text" string',
    ),
    "label_not_a_string": (
        [b'{"text": "abab", "label": 1}'],
        None,
        'train.jsonl line 1: "label" must be one',
    ),
    "character_outside": (
        [b'{"text": "abzb", "label": "1"}'],
        None,
        "character 'z' at position 2 is outside",
    ),
    "not_utf8": ([b'{"text": "ab\xff\xfe", "label": "1"}'], None, "train.jsonl line 1: not UTF-8 (byte 0xff"),
    "huge_line": ([GOOD[0], HUGE], None, "train.jsonl line 2: longer than"),
    "empty_train": ([], None, "train.jsonl holds no examples"),
}


def faulty(tmp_path: Path, name: str) -> tuple[Path, str]:
    lines, raw_meta, expected = FAULTS[name]
    meta = {"alphabet": None} if name == "meta_without_alphabet" else None
    return write_folder(
        tmp_path / "mine", lines or ([] if name == "empty_train" else GOOD), meta, raw_meta
    ), expected


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_faulty_folder_is_one_short_line_naming_it(name, make_config, tmp_path):
    from harness.tasks.training import run

    folder, expected = faulty(tmp_path, name)
    with pytest.raises(ConfigError) as err:
        run(
            make_config("data=folder", f"data.path={folder}", "data.length=4", "preflight=false", *PROBES_OFF)
        )
    message = str(err.value)
    assert message.startswith(f"data.path={folder}: ") and expected in message, message
    assert len(message) < 400 and "\n" not in message
    assert not (tmp_path / "run" / "verdict.json").exists()


@pytest.mark.slow
def test_a_huge_line_keeps_the_console_and_verdict_small(tmp_path, run_train):
    """The real command line on a folder with a 5 MB line: exit 2, one short line, nothing of the file copied."""
    folder, _ = faulty(tmp_path, "huge_line")
    result = run_train("data=folder", f"data.path={folder}", "data.length=4", "preflight=false", *PROBES_OFF)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert lines[-1].startswith(f"error: data.path={folder}: train.jsonl line 2: longer than"), lines[-1]
    assert len(result.stderr) + len(result.stdout) < 20_000 and "Traceback" not in result.stderr
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())  # the run's own, small
    assert verdict["status"] == "CONFIG_ERROR" and (tmp_path / "run" / "verdict.json").stat().st_size < 2000


@pytest.mark.slow  # a sweep through train.py: the job's CONFIG_ERROR verdict holds the line, not the file
def test_a_huge_line_in_a_sweep_leaves_a_small_verdict(tmp_path, run_train):
    folder, _ = faulty(tmp_path, "huge_line")
    result = run_train("-m", "data=folder", f"data.path={folder}", "data.length=4", "n=1,2", *PROBES_OFF)
    verdicts = sorted((tmp_path / "sweep").glob("*/verdict.json"))
    assert len(verdicts) == 2 and all(v.stat().st_size < 2000 for v in verdicts), result.stderr[-2000:]
    assert json.loads(verdicts[0].read_text())["status"] == "CONFIG_ERROR"
    assert len(result.stderr) + len(result.stdout) < 50_000


def test_the_empty_train_split_message_gives_a_fix_that_makes_sense():
    from harness.train.overfit import OverfitData

    class Empty:
        train_dataset: list = []

        def setup(self, stage=None) -> None:
            pass

    with pytest.raises(ConfigError) as err:
        OverfitData(Empty(), n=2, steps=1).setup()
    assert "n<=0" not in str(err.value) and "empty" in str(err.value)


@pytest.mark.parametrize(
    "meta", ["[]", '{"format": 1, "task": "classify"}', '{"format": 1, "task": "classify", ']
)
def test_a_cache_of_the_wrong_shape_is_regenerated(meta, tmp_path):
    from harness.data import SyntheticDataModule
    from harness.data.format import read_split

    dm = SyntheticDataModule(length=8, size=20, val_size=5, root=str(tmp_path))
    dm.prepare_data()
    records = read_split(dm.dataset_dir, "train")
    (dm.dataset_dir / "meta.json").write_text(meta)
    again = SyntheticDataModule(length=8, size=20, val_size=5, root=str(tmp_path))
    again.prepare_data()
    again.setup()
    assert [again.train_dataset.record(i) for i in range(20)] == records


def test_a_cache_whose_content_is_wrong_under_matching_checksums_is_regenerated(tmp_path):
    from harness.data import SyntheticDataModule
    from harness.data.format import read_meta, read_split

    dm = SyntheticDataModule(length=8, size=20, val_size=5, root=str(tmp_path))
    dm.prepare_data()
    records = read_split(dm.dataset_dir, "train")
    bad = b'{"label": "1"}\n' * 20  # no text: only the line-by-line check can see it
    (dm.dataset_dir / "train.jsonl").write_bytes(bad)
    meta = read_meta(dm.dataset_dir)
    meta["splits"]["train"]["sha256"] = hashlib.sha256(bad).hexdigest()
    (dm.dataset_dir / "meta.json").write_text(json.dumps(meta))
    again = SyntheticDataModule(length=8, size=20, val_size=5, root=str(tmp_path))
    again.prepare_data()
    again.setup()
    assert [again.train_dataset.record(i) for i in range(20)] == records


@pytest.mark.parametrize("mode", ["full", "overfit"])
def test_an_empty_validation_split_is_bad_input(mode, make_config, tmp_path):
    """It was a preflight FAIL (exit 3) with data=folder mode=full, where the synthetic source refuses
    data.val_size=0 at the door (exit 2): a split with no example is bad input, whichever source and mode."""
    from harness.tasks.training import run

    folder = write_folder(tmp_path / "mine", GOOD)
    (folder / "val.jsonl").write_bytes(b"")
    meta = json.loads((folder / "meta.json").read_text())
    meta["splits"]["val"] = {"examples": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    (folder / "meta.json").write_text(json.dumps(meta))
    cfg = make_config("data=folder", f"data.path={folder}", "data.length=4", f"mode={mode}", *PROBES_OFF)
    with pytest.raises(ConfigError) as err:
        run(cfg)
    assert str(err.value) == (
        f"data.path={folder}: val.jsonl holds no examples; a dataset needs at least one validation example"
    )


def test_a_forks_empty_split_is_bad_input_too(make_config, tmp_path):
    """Any source, not only the built-in ones: checked once the datamodule is set up."""
    from harness.tasks.training import check_splits

    class Fork:
        train_dataset, val_dataset = [1, 2, 3], []

    with pytest.raises(ConfigError, match=r"^data=my\.Fork: the validation split holds no examples"):
        check_splits(Fork(), "my.Fork")
    check_splits(type("Stream", (), {"train_dataset": iter([1]), "val_dataset": iter([2])})(), "my.Stream")


@pytest.mark.slow  # a train.py run: ~10 s
def test_an_empty_validation_split_through_train_py_exits_2_in_one_line(run_train, tmp_path):
    folder = write_folder(tmp_path / "mine", GOOD)
    (folder / "val.jsonl").write_bytes(b"")
    meta = json.loads((folder / "meta.json").read_text())
    meta["splits"]["val"] = {"examples": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    (folder / "meta.json").write_text(json.dumps(meta))
    result = run_train("data=folder", f"data.path={folder}", "data.length=4", "mode=full", *PROBES_OFF)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "val.jsonl holds no examples" in lines[0], (
        result.stderr
    )
    assert "Traceback" not in result.stdout + result.stderr
