"""The template's price at a real size, in nanogpt.json: `ratio`, seconds per step of the harness's `model=gpt
model.size=small` training (the real Trainer, the run's loss, guard, resume state and mode=full's probes) over
nanoGPT's plain loop (its model below, as karpathy/nanoGPT writes it); same shapes, one process. Target <= 1.05."""

# nanoGPT's side: GPT, Block, CausalSelfAttention, MLP, weight-tied head, its init, and its AdamW loop (weight decay
# on matrices, fused where torch offers it, gradient clipping at 1.0). The two sides alternate block by block.

from __future__ import annotations

import inspect
import math
import statistics
import time
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from benchmarks import write
from benchmarks.loop import StepClock, _Repeat
from harness.config.groups.probes import Probes
from harness.models import GPT
from harness.probes import build_probes
from harness.train.checkpoints import ResumeState
from harness.train.module import HarnessModule
from harness.train.nonfinite import NonFiniteGuard

TARGET = 1.05
SIZE = dict(d_model=384, layers=6, heads=6)  # model.size=small
VOCAB, SEQ, BATCH = 4096, 128, 4


@dataclass
class GPTConfig:
    block_size: int = SEQ
    vocab_size: int = VOCAB
    n_layer: int = SIZE["layers"]
    n_head: int = SIZE["heads"]
    n_embd: int = SIZE["d_model"]
    dropout: float = 0.0
    bias: bool = True  # nanoGPT's default, as model=gpt's


class LayerNorm(nn.Module):
    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.size()  # nanoGPT's own code: its reshapes as it writes them
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(config.n_embd, config.bias), CausalSelfAttention(config)
        self.ln_2, self.mlp = LayerNorm(config.n_embd, config.bias), MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and next(self.parameters()).is_cuda
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))


def batch(seed: int = 0) -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(seed))
    return {  # contiguous, as nanoGPT's loader hands them out (its loss views them flat)
        "input_ids": ids[:, :-1].contiguous(),
        "targets": ids[:, 1:].contiguous(),
        "loss_mask": torch.ones(BATCH, SEQ, dtype=torch.bool),
    }


class Tokens:
    """A tokenizer of VOCAB ids, each shown as a printable character: what the datapoints probe decodes with."""

    vocab_size, bos_id, eos_id = VOCAB, None, None

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(32 + i % 95) for i in ids)


class Data:
    """The run's data as the probes see it: the benchmark's batch, its rows the training and validation examples."""

    def __init__(self, rows: dict):
        self.tokenizer = Tokens()
        self.train_dataset = self.val_dataset = [{k: v[i] for k, v in rows.items()} for i in range(BATCH)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_dataset, batch_size=BATCH)

    val_dataloader = train_dataloader


def nanogpt_step(steps: int, warmup: int = 2) -> float:
    torch.manual_seed(0)
    model, data = NanoGPT(GPTConfig()), batch()
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    for i in range(warmup + steps):
        if i == warmup:
            started = time.perf_counter()
        _, loss = model(data["input_ids"], data["targets"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - started) / steps


def harness_step(steps: int, warmup: int = 2) -> float:
    torch.manual_seed(0)
    model = GPT(VOCAB, size="small", max_len=SEQ)
    clock = StepClock(warmup)
    probes = build_probes(OmegaConf.structured(Probes), run_dir=None, data=Data(batch()), overfit=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=warmup + steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        gradient_clip_val=1.0,
        callbacks=[NonFiniteGuard(), ResumeState(), clock, *probes],
    )
    repeated = torch.utils.data.DataLoader(_Repeat(batch(), warmup + steps), batch_size=None)
    trainer.fit(HarnessModule(model), train_dataloaders=repeated)
    return clock.seconds


def main(reps: int = 4, steps: int = 20) -> dict:
    ratios, seconds = [], {"harness": [], "nanogpt": []}
    for rep in range(reps):  # who goes first alternates
        order = (("harness", harness_step), ("nanogpt", nanogpt_step))
        for side, step in order if rep % 2 == 0 else order[::-1]:
            seconds[side].append(step(steps))
        ratios.append(seconds["harness"][-1] / seconds["nanogpt"][-1])
    ratio = round(statistics.median(ratios), 3)
    details = {"target": TARGET, "ratios": ratios, "seconds_per_step": seconds, "size": SIZE, "vocab": VOCAB}
    write("nanogpt", {"ratio": ratio}, {**details, "seq": SEQ, "batch": BATCH})
    return {"ratio": (ratio, ratio <= TARGET)}
