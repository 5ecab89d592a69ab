"""data=hf's prompt/response pairs without a chat template are joined by `data.separator` (a line break by
default), on the prompt's side: the decoded example shows it, the loss mask leaves it out, a custom one (as the
command line writes it) works, a bad one is one line, and the prepared folder is keyed by it."""

from __future__ import annotations

import json

import pytest

from harness.errors import ConfigError
from harness.tasks.training import run
from tests.conftest import PROBES_OFF
from tests.data.test_hf import BPE, jsonl, masked_targets, ready

pytest.importorskip("datasets")

QUESTIONS = [
    ("What does textwrap.dedent do?", "Remove any common leading whitespace from every line."),
    ("What does str.strip do?", "Return a copy without leading and trailing whitespace."),
    ("What does len do?", "Return the number of items in a container."),
    ("What does sorted do?", "Return a new sorted list from the items in an iterable."),
] * 5


def _pairs(tmp_path, **keys):
    rows = [{"prompt": p, "response": r} for p, r in QUESTIONS]
    path = jsonl(tmp_path / "pairs.jsonl", rows)
    return rows, ready(
        tmp_path,
        length=96,
        tokenizer=BPE,
        path=str(path),
        prompt_field="prompt",
        response_field="response",
        **keys,
    )


@pytest.mark.parametrize(
    ("given", "separator"),
    [(None, "\n"), ("\\n### Response:\\n", "\n### Response:\n"), (" => ", " => "), ("", "")],
    ids=["default", "escapes as a command line writes them", "custom", "nothing, when asked"],
)
def test_the_separator_joins_prompt_and_response_outside_the_loss(tmp_path, given, separator):
    rows, data = _pairs(tmp_path, **({} if given is None else {"separator": given}))
    tokenizer, eos = data.tokenizer, data.tokenizer.decode([data.tokenizer.eos_id])
    assert len(data.train_dataset) == 18
    for i in range(len(data.train_dataset)):
        item, row = data.train_dataset[i], rows[i]
        ids = [*item["input_ids"].tolist(), item["targets"][-1].item()]
        assert tokenizer.decode(ids).startswith(row["prompt"] + separator + row["response"] + eos)
        assert masked_targets(item, tokenizer) == row["response"] + eos  # the response, its end: nothing else
        assert data.train_dataset.record(i) == {
            "text": row["prompt"] + separator,
            "label": row["response"] + eos,
        }


def test_the_separator_keys_the_prepared_folder(tmp_path):
    """Another separator is other tokens: prepared anew, not read from the folder of the first."""
    _, first = _pairs(tmp_path)
    _, other = _pairs(tmp_path, separator=" => ")
    assert (
        first.dataset_dir != other.dataset_dir and first.dataset_dir.is_dir() and other.dataset_dir.is_dir()
    )


@pytest.mark.parametrize("value", [None, 3, ["\n"]])
def test_a_separator_that_is_not_text_is_one_line(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        _pairs(tmp_path, separator=value)
    message = str(err.value)
    assert message.startswith(f"data.separator={value}: must be text") and "\n" not in message, message


def test_a_run_with_a_custom_separator_passes_the_data_checks(tmp_path, make_config, one_thread):
    """The recipe's command line (docs/workflow.md): the preflight reads the examples back as they are written."""
    rows = [{"prompt": p, "response": r} for p, r in QUESTIONS]
    cfg = make_config(
        "model=transformer", "data=hf", f"data.path={jsonl(tmp_path / 'pairs.jsonl', rows)}",
        "data.prompt_field=prompt", "data.response_field=response", "data.separator='\\n### Response:\\n'",
        "tokenizer=char", "data.length=96", f"data.root={tmp_path / 'data'}", "preflight=warn", "mode.max_steps=2",
        *PROBES_OFF,
    )  # fmt: skip
    checks = {c["name"]: c for c in run(cfg)["checks"]}
    for name in ("data_roundtrip", "loss_mask", "special_tokens"):
        assert checks[name]["status"] == "PASS", checks[name]
    (meta,) = (tmp_path / "data" / "hf").rglob("meta.json")
    alphabet = json.loads(meta.read_text())["tokenizer"]["alphabet"]  # the characters the examples hold
    assert "#" in alphabet and "\n" in alphabet and "\\" not in alphabet, alphabet
