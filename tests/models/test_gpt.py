"""model=gpt (src/harness/models/gpt.py): its presets' sizes, weight tying, causality with learned and rotary
positions, GPT-2's init, the config's keys and mistakes, and the whole harness (preflight + overfit) on it."""

from __future__ import annotations

import math

import pytest
import torch

from harness.config import build
from harness.errors import ConfigError
from harness.models import GPT
from harness.models.gpt import rotary_angles, rotate
from harness.tasks.training import run

VOCAB = 4096  # a small BPE's vocabulary: the size the tiny and small presets are named for
POSITIONS = ["learned", "rope"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest


def count(model: torch.nn.Module) -> int:
    """Parameters, a tied tensor once (`parameters()` yields each tensor once)."""
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("size", "low", "high"), [("tiny", 0.5e6, 2e6), ("small", 5e6, 20e6)])
def test_presets_land_in_their_parameter_bands(size, low, high):
    params = count(GPT(VOCAB, max_len=256, size=size))
    assert low <= params <= high, f"model.size={size}: {params / 1e6:.2f}M parameters"


def test_gpt2_preset_is_gpt2_small():
    """12 layers, 12 heads, d_model 768, 1024 positions, vocab 50257, tied head: GPT-2's 124.4M. Built on the
    meta device: the shapes without the memory or the init's time. An untied head would add 38.6M."""
    with torch.device("meta"):
        model = GPT(50257, max_len=1024, size="gpt2")
    assert len(model.blocks) == 12 and model.token_embedding.embedding_dim == 768
    assert model.blocks[0].attention.heads == 12
    assert abs(count(model) - 124.4e6) <= 0.01 * 124.4e6, count(model)


def test_output_head_shares_the_token_embedding():
    model = GPT(100, max_len=8, d_model=32, layers=1, heads=4)
    assert model.head.weight is model.token_embedding.weight
    assert model.head.weight.data_ptr() == model.token_embedding.weight.data_ptr()
    assert isinstance(model.token_embedding, torch.nn.Embedding)
    # both uses train the one tensor: the head's gradient reaches it where no input token is
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    assert model.token_embedding.weight.grad[1:].abs().sum() > 0


@pytest.mark.parametrize("positions", POSITIONS)
def test_causal_and_examples_never_mix(positions, make_config):
    """Built from conf/model/gpt.yaml as train.py builds it: the contract's shape, causality (changing the
    tokens after t leaves logits 0..t bit for bit, and moves the later ones), and examples kept apart."""
    cfg = make_config("model=gpt", f"model.positions={positions}", "model.d_model=32", "data.length=12")
    torch.manual_seed(0)
    model = build(cfg.model, "model", vocab_size=20).eval()
    ids = torch.randint(0, 20, (3, 12))
    with torch.no_grad():
        before = model(ids)
        assert before.shape == (3, 12, 20) and before.dtype == torch.float32
        for t in (0, 5, 10):
            changed = ids.clone()
            changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 20
            after = model(changed)
            assert torch.equal(before[:, : t + 1], after[:, : t + 1]), f"logits <= {t} see later tokens"
            assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :]), "logits ignore their own inputs"
        mixed = ids.clone()
        mixed[0] = (mixed[0] + 1) % 20
        assert torch.equal(model(mixed)[1:], before[1:]), "changing example 0 moved the others"


def test_rope_has_no_position_parameters_and_still_sees_word_order():
    torch.manual_seed(0)
    learned = GPT(20, max_len=16, d_model=32, layers=1, heads=4, positions="learned")
    rope = GPT(20, max_len=16, d_model=32, layers=1, heads=4, positions="rope")
    assert learned.position_embedding.weight.shape == (16, 32)
    assert rope.position_embedding is None
    assert not [n for n, _ in rope.named_parameters() if "position" in n]
    assert count(learned) - count(rope) == 16 * 32
    # one causal attention layer without positions sees a set of earlier tokens: swapping two of them would
    # leave the last logits as they are; rotary positions must move them
    # (float rounding alone: ~1e-5 of what changing one token does). At init the attention is near uniform,
    # which hides any position scheme (1e-3); sharpened, as training sharpens it, rope moves them 0.1 to 1
    with torch.no_grad():
        rope.blocks[0].attention.qkv.weight.mul_(25)
    ids, swapped, changed = torch.tensor([[1, 2, 3, 4, 5, 6], [2, 1, 3, 4, 5, 6], [2, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        base = rope.eval()(ids[None])[0, -1]
        swap, change = ((rope(x[None])[0, -1] - base).abs().max().item() for x in (swapped, changed))
    assert swap > 1e-2 * change, (
        f"rope: swapping tokens 0 and 1 moved the last logits {swap / change:.1e} as much"
    )


def test_rotary_scores_depend_only_on_the_distance():
    """q at m against k at n scores the same as at m + s, n + s: what makes rope relative."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    cos, sin = rotary_angles(40, 16, torch.device("cpu"))

    def score(m: int, n: int) -> float:
        at = lambda x, p: rotate(x, cos[p : p + 1], sin[p : p + 1])  # noqa: E731
        return (at(q, m) * at(k, n)).sum().item()

    assert score(7, 3) == pytest.approx(score(30, 26), abs=1e-4)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-2)  # and it does depend on the distance
    assert torch.allclose(rotate(q, cos[:1], sin[:1]), q)  # position 0: no turn


def test_gpt2_init():
    """N(0, 0.02) for Linear and Embedding weights, zero biases, each residual output projection at
    0.02 / sqrt(2 * layers); the loss at init is a uniform guess's."""
    torch.manual_seed(0)
    layers = 4
    model = GPT(VOCAB, max_len=64, d_model=256, layers=layers, heads=4)
    residual = 0.02 / math.sqrt(2 * layers)
    for block in model.blocks:
        for projection in (block.attention.out, block.mlp.out):
            assert projection.weight.std().item() == pytest.approx(residual, rel=0.03)
        for linear in (block.attention.qkv, block.mlp.up):
            assert linear.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert model.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert model.position_embedding.weight.std().item() == pytest.approx(0.02, rel=0.03)
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    assert biases and all(not b.any() for b in biases)
    with torch.no_grad():
        logits = model(torch.randint(0, VOCAB, (4, 64)))
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.randint(0, VOCAB, (4 * 64,)))
    assert loss.item() == pytest.approx(math.log(VOCAB), abs=0.05)


def test_explicit_keys_override_the_preset():
    model = GPT(VOCAB, max_len=32, size="small", layers=2)
    assert len(model.blocks) == 2 and model.token_embedding.embedding_dim == 384
    assert model.blocks[0].attention.heads == 6
    model = GPT(VOCAB, max_len=32, size="tiny", d_model=64, heads=2)
    assert model.token_embedding.embedding_dim == 64 and len(model.blocks) == 4
    assert model.blocks[0].attention.heads == 2
    plain = GPT(VOCAB, max_len=32, size="tiny", bias=False)
    assert not [n for n, _ in plain.named_parameters() if n.endswith("bias")]
    assert count(plain) < count(GPT(VOCAB, max_len=32, size="tiny"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.size=huge"], "model.size=huge: choose one of tiny, small, gpt2"),
        (["model.heads=3"], "model.heads=3: must divide model.d_model=128"),
        (["model.d_model=100", "model.heads=3"], "model.heads=3: must divide model.d_model=100"),
        (["model.positions=rope", "model.d_model=12"], "model.heads=4: rope turns channel pairs"),
        (["model.positions=sinusoidal"], "model.positions=sinusoidal: choose one of learned, rope"),
        (["model.layers=0"], "model.layers=0: must be >= 1"),
    ],
)
def test_mistakes_are_one_line_config_errors(overrides, message, make_config):
    """Built as train.py builds it, each mistake is a ConfigError (exit 2) naming the key to fix."""
    cfg = make_config("model=gpt", *overrides)
    with pytest.raises(ConfigError) as error:
        build(cfg.model, "model", vocab_size=20)
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.parametrize("positions", POSITIONS)
def test_preflight_and_overfit_pass(positions, make_config):
    """The whole harness on a small GPT: every preflight row PASS (no WARN), the overfit PASS, no dead
    parameter (the tied head included), and the verdict names the model."""
    overrides = ("model.d_model=32", "model.layers=2", "model.heads=4", f"model.positions={positions}")
    verdict = run(make_config("model=gpt", *overrides, "mode=overfit", "n=2"))
    assert verdict["status"] == "PASS", verdict
    assert verdict["checks"], "no preflight ran"
    alarms = [f"{c['name']} {c['status']}: {c['detail']}" for c in verdict["checks"] if c["status"] != "PASS"]
    assert not alarms, "\n".join(alarms)
    assert verdict["model"] == "GPT" and verdict["model_group"] == "gpt", verdict
    assert verdict["dead_params"] == [], verdict["dead_params"]
    assert verdict["steps"] < 1000
