"""The data and tokenizer groups' declarations (harness.config.groups.data): each option composes to the values its
yaml gave before, the door refuses what a data source would refuse when built (one line naming the key, exit 2),
the sources built from code refuse in the same words, and no yaml repeats a declaration's default."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.config.declare import check_declared, declared_fields
from harness.config.groups import data as declared
from harness.errors import ConfigError
from tests.config.keys import composed, refused_in_one_line
from tests.conftest import CONF, sampled, train

LOADER = {"root": "${paths.data_dir}", "num_workers": 0}
LM = {"length": 128, "val_fraction": 0.1, "val_windows": 512, "seed": 0, "batch_size": 16}
#: `train.py --cfg job <group>=<option>` as the yaml files gave them before their keys were declared
BEFORE = {
    ("data", "synthetic"): {
        "_target_": "harness.data.SyntheticDataModule",
        "length": 32,
        "size": 1000,
        "val_size": 100,
        "rule": "random",
        "alphabet": "abcdefghijklmnop",
        "labels": "0123",
        "seed": 0,
        "batch_size": 32,
        **LOADER,
    },
    ("data", "text"): {
        "_target_": "harness.data.TextDataModule",
        "length": 32,
        "path": None,
        "alphabet": None,
        "val_fraction": 0.1,
        "batch_size": 32,
        **LOADER,
    },
    ("data", "folder"): {
        "_target_": "harness.data.FolderDataModule",
        "path": "???",
        "length": 32,
        "batch_size": 32,
        "num_workers": 0,
    },
    ("data", "corpus"): {
        "_target_": "harness.data.CorpusDataModule",
        "files": "stdlib",
        "tokenizer": "${tokenizer}",
        "text_field": "text",
        **LM,
        "max_files": None,
        "max_bytes": None,
        "workers": None,
        **LOADER,
    },
    ("data", "hf"): {
        "_target_": "harness.data.HFDataModule",
        "path": "???",
        "name": None,
        "split": "train",
        "val_split": None,
        "text_field": "text",
        "prompt_field": None,
        "response_field": None,
        "separator": "\n",
        "messages_field": None,
        "packing": False,
        "streaming": False,
        **LM,
        "num_proc": None,
        "tokenizer": "${tokenizer}",
        **LOADER,
    },
    ("tokenizer", "char"): {"kind": "char", "alphabet": None},
    ("tokenizer", "bpe"): {"kind": "bpe", "vocab_size": 4096},
    ("tokenizer", "hf"): {"kind": "hf", "path": None, "eos_token": None},
}
OPTIONS = {"data": declared.OPTIONS_DATA, "tokenizer": declared.OPTIONS_TOKENIZER}
#: what each option needs given before its own values pass the door (a required key)
GIVEN = {"folder": ["data.path=mine"], "hf": ["data.path=mine.parquet"]}

#: values a source (or the tokenizer it builds) refuses when built: overrides, the key the door names, its words
REFUSED = [
    ("data.batch_size=0", "data.batch_size", "must be >= 1"),
    ("data.size=0", "data.size", "must be >= 1"),
    ("data.val_size=0", "data.val_size", "must be >= 1"),
    ("data.num_workers=-1", "data.num_workers", "must be >= 0"),
    ("data.rule=last", "data.rule", "choose one of random, first_token"),
    ("data.alphabet=''", "data.alphabet", "must be a non-empty string"),
    ("data.labels=''", "data.labels", "must be a non-empty string"),
    ("data.labels=abc", "data.labels", "label tokens must be distinct"),
    ("data=text data.val_fraction=0", "data.val_fraction", "must lie strictly between 0 and 1"),
    ("data=text data.val_fraction=nan", "data.val_fraction", "must lie strictly between 0 and 1"),
    ("data=corpus data.val_fraction=1", "data.val_fraction", "must lie strictly between 0 and 1"),
    ("data=corpus data.val_windows=0", "data.val_windows", "must be >= 1"),
    ("data=corpus data.max_bytes=0", "data.max_bytes", "must be >= 1"),
    ("data=corpus data.workers=0", "data.workers", "must be >= 1"),
    ("data=corpus tokenizer.vocab_size=256", "tokenizer.vocab_size", "must be >= 257"),
    ("data=corpus tokenizer=hf", "tokenizer.path", "required"),
    ("data=corpus tokenizer=char tokenizer.alphabet=''", "tokenizer.alphabet", "must hold a character"),
    ("data=corpus tokenizer.kind=char", "tokenizer.kind", "choose one of bpe"),
    ("data=hf data.path=a data.num_proc=0", "data.num_proc", "must be >= 1"),
    ("data=hf data.path=a data.prompt_field=p", "data.response_field", "fine-tuning on pairs needs both"),
    (
        "data=hf data.path=a data.messages_field=m data.prompt_field=p data.response_field=r",
        "data.messages_field",
        "not both",
    ),
    (
        "data=hf data.path=a data.streaming=true data.packing=true",
        "data.packing",
        "a stream is fine-tuned padded",
    ),
]
#: the edges of the same ranges, which the sources take
TAKEN = [
    "data.num_workers=0 data.seed=0 data.size=1 data.val_size=1 data.batch_size=1",
    "data.alphabet=a data.labels=b",
    "data=text data.val_fraction=0.999",
    "data=corpus data.val_windows=null data.max_files=1 data.max_bytes=1 data.workers=1",
    "data=corpus tokenizer.vocab_size=257",
    "data=corpus tokenizer=char tokenizer.alphabet=a",
    "data=hf data.path=a data.prompt_field=p data.response_field=r data.packing=true",
    "data=hf data.path=a data.messages_field=m data.streaming=true",
]


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_each_option_composes_to_the_values_it_had(group, option):
    lm = [] if group == "data" else ["data=corpus"]  # bpe and hf tokenize data=corpus's files
    cfg = composed(*lm, f"{group}={option}")
    assert OmegaConf.to_container(cfg[group]) == BEFORE[group, option]
    assert OmegaConf.get_type(cfg[group]) is OPTIONS[group][option]  # typed by its declaration
    given = (
        ["tokenizer.path=tokenizer.json"] if (group, option) == ("tokenizer", "hf") else GIVEN.get(option, [])
    )
    check_declared(composed(*lm, f"{group}={option}", *given))  # its own values pass


def test_a_real_lm_s_data_still_picks_its_model_and_tokenizer_and_the_command_line_wins():
    for option in ("corpus", "hf"):
        cfg = composed(f"data={option}")
        assert (cfg.model._target_, cfg.tokenizer.kind) == ("harness.models.GPT", "bpe"), option
    cfg = composed("data=corpus", "tokenizer=char", "model=rnn")
    assert (cfg.model._target_, cfg.tokenizer.kind) == ("harness.models.RNN", "char")
    assert composed("experiment=lm").data.files == "stdlib"


@pytest.mark.parametrize(
    ("overrides", "name", "words"), sampled(REFUSED, every=5), ids=[o for o, _, _ in REFUSED]
)
def test_a_value_the_source_refuses_is_refused_by_the_declaration(overrides, name, words):
    refused_in_one_line(overrides, name, words)


@pytest.mark.parametrize("overrides", sampled(TAKEN, every=5))
def test_the_edges_of_each_range_are_taken(overrides):
    check_declared(composed(*overrides.split()))


@pytest.mark.slow  # fresh interpreters: seconds
def test_a_source_built_from_code_refuses_in_the_door_s_words(tmp_path):
    """One rule, two callers: the sources hold their arguments to the rules the declaration checks at the door."""
    from harness.data import HFDataModule, SyntheticDataModule, TextDataModule

    cases = [
        ("data.alphabet=''", lambda: SyntheticDataModule(length=8, alphabet="", root=str(tmp_path))),
        ("data.labels=ab", lambda: SyntheticDataModule(length=8, labels="ab", root=str(tmp_path))),
        (
            "data=text data.val_fraction=0",
            lambda: TextDataModule(length=8, val_fraction=0.0, root=str(tmp_path)),
        ),
        (
            "data=hf data.path=a data.streaming=true data.packing=true",
            lambda: HFDataModule(length=8, packing=True, streaming=True, path="a", root=str(tmp_path)),
        ),
        (
            "data=hf data.path=a data.prompt_field=p",
            lambda: HFDataModule(length=8, path="a", prompt_field="p", root=str(tmp_path)),
        ),
    ]
    for overrides, build in cases:
        with pytest.raises(ConfigError) as door:
            check_declared(composed(*overrides.split()))
        with pytest.raises(ConfigError) as code:
            build()
        assert str(code.value) == str(door.value), overrides


@pytest.mark.slow  # fresh interpreters: seconds
def test_a_refusal_at_the_command_line_is_one_line_and_exit_2(tmp_path, data_root):
    for overrides, name, words in (REFUSED[5], REFUSED[8], REFUSED[14]):
        done = train(*overrides.split(), cwd=tmp_path, data_root=data_root)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"error: {name}=") and words in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def test_a_fork_s_source_and_its_own_keys_still_compose():
    """A declared node still takes `+data.key=v` and another `_target_` (tests/perf/slow_data.py's)."""
    cfg = composed("data._target_=tests.perf.slow_data.SlowSynthetic", "+data.sleep_s=0.003")
    assert (cfg.data._target_, cfg.data.sleep_s) == ("tests.perf.slow_data.SlowSynthetic", 0.003)
    check_declared(cfg)


@pytest.mark.parametrize(
    ("group", "option"), sampled(list(BEFORE), every=5), ids=[f"{g}={o}" for g, o in BEFORE]
)
def test_no_yaml_repeats_its_declaration_s_default(group, option):
    text = (CONF / group / f"{option}.yaml").read_text()
    own = OmegaConf.load(CONF / group / f"{option}.yaml")
    assert own.defaults[0] == f"{option}_schema" and own.defaults[-1] == "_self_", list(own.defaults)
    defaults = {item.name: item.default for item in declared_fields(OPTIONS[group][option])}
    repeated = [name for name in own if name != "defaults" and own[name] == defaults.get(name, object())]
    assert not repeated, f"conf/{group}/{option}.yaml repeats its declaration's default of {repeated}"
    assert "src/harness/config/groups/data.py" in text and "python train.py" in text  # it still teaches
