"""Every built-in model and datamodule meets the contracts of docs/contracts.md, built the way train.py builds them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from torch import nn

import harness
from harness.errors import ConfigError
from harness.tasks.training import build, run
from tests.conftest import PROBES_OFF, sampled

MODELS = ["transformer", "rnn", "lstm", "gpt"]
#: data option -> the overrides that keep it small here
DATA = {
    "synthetic": ("data=synthetic",),
    "text": ("data=text",),
    "corpus": ("data=corpus", "data.max_bytes=60000", "tokenizer=bpe", "tokenizer.vocab_size=320"),
}


@pytest.fixture(params=list(DATA))
def datamodule(request, make_config):
    cfg = make_config(*DATA[request.param], "data.length=12")
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    return cfg, dm


@pytest.mark.parametrize("name", sampled(MODELS, every=2))
def test_model_contract(name, datamodule, make_config):
    cfg, dm = datamodule
    cfg = make_config(f"model={name}", *DATA[cfg.hydra.runtime.choices.data], "data.length=12")
    assert "vocab_size" not in cfg.model, (
        "the model config must not hard-code vocab_size: the harness injects it"
    )
    model = build(cfg.model, "model", vocab_size=dm.tokenizer.vocab_size)
    assert isinstance(model, nn.Module)
    assert isinstance(model.token_embedding, nn.Embedding)
    batch = next(iter(dm.val_dataloader()))
    logits = model(batch["input_ids"])
    b, t = batch["input_ids"].shape
    assert logits.shape == (b, t, dm.tokenizer.vocab_size) and logits.dtype.is_floating_point

    # causal: changing the inputs after position 5 leaves outputs 0..5 unchanged, and changes later ones
    model.eval()
    changed = batch["input_ids"].clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % dm.tokenizer.vocab_size
    with torch.no_grad():
        before, after = model(batch["input_ids"]), model(changed)
    assert torch.equal(before[:, :6], after[:, :6]), "outputs before position 6 depend on later inputs"
    assert not torch.allclose(before[:, 6:], after[:, 6:]), "outputs ignore their own inputs"

    # examples never mix: changing example 0 leaves example 1's outputs unchanged
    mixed = batch["input_ids"].clone()
    mixed[0] = (mixed[0] + 1) % dm.tokenizer.vocab_size
    with torch.no_grad():
        assert torch.equal(model(mixed)[1:], before[1:])


@pytest.mark.parametrize("name", MODELS)
def test_unknown_model_key_fails_loudly(name, make_config):
    cfg = make_config(f"model={name}", "+model.dimension=3")
    with pytest.raises(ConfigError, match=r"model\.dimension"):
        build(cfg.model, "model", vocab_size=10)


def test_datamodule_contract(datamodule):
    cfg, dm = datamodule
    tok = dm.tokenizer
    assert isinstance(tok.vocab_size, int) and tok.vocab_size > 1
    sample = tok.decode(list(range(tok.vocab_size)))
    assert tok.decode(tok.encode(sample)) == sample
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        batch = next(iter(loader))
        assert {"input_ids", "targets", "loss_mask"} <= set(batch)
        assert batch["input_ids"].dtype == torch.long and batch["targets"].dtype == torch.long
        assert batch["loss_mask"].dtype == torch.bool
        assert batch["input_ids"].shape == batch["targets"].shape == batch["loss_mask"].shape
        assert batch["input_ids"].shape[1] == cfg.data.length
        assert int(batch["input_ids"].max()) < tok.vocab_size and int(batch["targets"].max()) < tok.vocab_size
        if cfg.hydra.runtime.choices.data == "synthetic":  # classification: only the last position counts
            assert batch["loss_mask"][:, -1].all() and not batch["loss_mask"][:, :-1].any()
        else:  # language modelling: every position counts, targets are the inputs shifted by one
            assert batch["loss_mask"].all()
            assert torch.equal(batch["targets"][:, :-1], batch["input_ids"][:, 1:])


def test_fork_model_plugs_in_by_target(make_config):
    """A model of a fork's own (tests/forks/models.py), named by _target_ on an existing group's keys, passes the
    preflight and memorizes (tests/project/test_guides.py runs the same through the real train.py)."""
    verdict = run(make_config("model=rnn", "model._target_=tests.forks.models.GRU", "n=1", *PROBES_OFF))
    assert verdict["status"] == "PASS", verdict
    assert all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]


#: methods that change a list, dict or set in place
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add", "discard"}


def module_state(source: str) -> list[str]:
    """What a module's source binds at module level that could carry state between runs (practice P7): a
    `global` statement anywhere; a lowercase module-level name other than the logger (constants are
    UPPER_CASE; classes and functions are defined, not assigned); a module-level augmented assignment, loop
    or with; and, inside functions, a module-level name changed in place (`NAME[k] = v`, `NAME.append(v)`)."""
    import ast

    tree = ast.parse(source)
    found = [
        f"line {n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)
    ]
    constants = set()
    for node in tree.body:
        if isinstance(node, (ast.AugAssign, ast.For, ast.While, ast.With)):
            found.append(f"line {node.lineno}: module-level {type(node).__name__}")
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for name in (n for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)):
            constants.add(name.id)
            if not (name.id.isupper() or name.id.startswith("__") or name.id == "log"):
                found.append(f"line {node.lineno}: {name.id} = ...")
    for node in ast.walk(tree):
        changed = None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            changed = next(
                (
                    t.value.id
                    for t in targets
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                ),
                None,
            )
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
        ):
            changed = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        if changed in constants:
            found.append(f"line {node.lineno}: {changed} changed in place")
    return found


def test_no_module_level_state():
    planted = (
        "cache = {}\nLIMIT = 3\nlog = 1\nTABLE = {}\nfor i in range(2):\n    pass\ndef f():\n    global LIMIT\n"
        "    LIMIT = 4\n    TABLE['k'] = 1\n    TABLE.update(a=1)\n    local = {}\n    local['k'] = 1\n"
    )
    assert sorted(module_state(planted)) == sorted(
        [
            "line 8: global LIMIT",
            "line 1: cache = ...",
            "line 5: module-level For",
            "line 10: TABLE changed in place",
            "line 11: TABLE changed in place",
        ]
    )  # the checker catches every kind, and not a function's own dict
    package = Path(harness.__file__).parent
    found = {
        str(path.relative_to(package)): state
        for path in sorted(package.rglob("*.py"))
        if (state := module_state(path.read_text()))
    }
    assert not found, found
