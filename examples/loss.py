"""A loss of your own, plugged in by config: `python train.py loss._target_=examples.loss.FocalLoss loss.gamma=2`.

Focal loss (Lin et al., 2017) down-weights the positions the model already gets right: (1 - p)^gamma x -log p.
At initialization p is about 1/vocab, so it starts near the cross entropy; gamma=0 is the cross entropy."""

from __future__ import annotations

from harness.ops.loss import Loss


class FocalLoss(Loss):
    """(1 - p(target))^gamma x -log p(target) at each position; the mean over the loss mask is the loss."""

    def __init__(self, gamma: float = 2.0, vectorize: bool = True):
        super().__init__(vectorize)
        self.gamma = gamma

    def per_position(self, logits, targets, loss_mask):
        nll = self.nll(logits, targets, loss_mask)  # -log p(target), what perplexity is made of
        return (1 - (-nll).exp()).pow(self.gamma) * nll
