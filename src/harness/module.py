"""The LightningModule: any Model contract, masked cross entropy, AdamW, the metrics of a verdict."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import nn

from harness.twins import MaskedCrossEntropy


def masked_metrics(logits: torch.Tensor, targets: torch.Tensor, loss_mask: torch.Tensor) -> dict:
    """Accuracy and p(correct) (mean softmax probability of the target) over the masked positions."""
    with torch.no_grad():
        mask = loss_mask.float()
        probs = logits.float().softmax(dim=-1)
        p_target = probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        correct = (logits.argmax(dim=-1) == targets).float()
        total = mask.sum()
        return {"acc": (correct * mask).sum() / total, "p_correct": (p_target * mask).sum() / total}


class HarnessModule(pl.LightningModule):
    """Trains `model` on Batch dicts {input_ids, targets, loss_mask}; logs loss, acc and p_correct
    under train/ and val/. The model holds architecture only: everything else lives here or in probes."""

    def __init__(self, model: nn.Module, lr: float = 3e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.99), vectorize: bool = True, compile: bool | str = False):
        super().__init__()
        self.model = model
        self.lr, self.weight_decay, self.betas = lr, weight_decay, tuple(betas)
        self.loss_fn = MaskedCrossEntropy(vectorize)
        # compile=true: the training step runs a compiled forward sharing the model's parameters. It is
        # kept out of the module tree (no `_orig_mod.` keys in state_dict and checkpoints), and everything else
        # (validation, the verdict's evaluation, probes and preflight checks, their hooks on `token_embedding`)
        # runs the plain model: same weights, and nothing they report can depend on the compiler.
        # A string names the torch.compile backend (true: its default, inductor).
        backend = compile if isinstance(compile, str) else "inductor"
        self.__dict__["train_forward"] = torch.compile(model, backend=backend) if compile else model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def loss_and_metrics(self, batch: dict, logits: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        logits = self.model(batch["input_ids"]) if logits is None else logits
        loss = self.loss_fn(logits, batch["targets"], batch["loss_mask"])
        return loss, {"loss": loss.detach(), **masked_metrics(logits, batch["targets"], batch["loss_mask"])}

    def training_step(self, batch: dict, batch_idx: int) -> dict:
        logits = self.train_forward(batch["input_ids"])
        loss, metrics = self.loss_and_metrics(batch, logits)
        self.log_dict({f"train/{k}": v for k, v in metrics.items()}, on_step=True, on_epoch=False,
                      batch_size=batch["input_ids"].shape[0])
        # the logits, detached, for the logit-mass probe (harness.probes.logits): no second forward pass
        return {"loss": loss, "logits": logits.detach()}

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        _, metrics = self.loss_and_metrics(batch)
        # sync_dist: under DDP each rank validates its share; the logged value is the mean over ranks
        self.log_dict({f"val/{k}": v for k, v in metrics.items()}, on_step=False, on_epoch=True,
                      batch_size=batch["input_ids"].shape[0], sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay, betas=self.betas)
