"""`Embeddings`: the token embeddings on their first two principal components (`project`) every K steps, as an
image to the trackers; the last as embeddings.png. Axes: vocab, dim."""

from __future__ import annotations

import logging

import torch

from harness.probes.probe import Probe
from harness.probes.tokens.datapoints import visible_text
from harness.probes.trackers import has_tracker, log_image
from harness.train.distributed.shard_sums import is_shard

log = logging.getLogger(__name__)


def project(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Float[vocab, 2] coordinates on the top two principal components, Float[2] variance fractions)."""
    # eigenvectors of the [dim, dim] scatter XᵀX: an SVD's axes at a sixth of its cost (GPT-2: 0.5 s against 3.2 s)
    x = weight.detach().float()
    centered = x - x.mean(dim=0)
    scatter = centered.T @ centered
    variance, axes = torch.linalg.eigh(scatter)  # ascending
    coords = centered @ axes[:, [-1, -2]]
    # each axis's sign fixed so its largest coordinate is positive: frames don't flip
    largest = coords.gather(0, coords.abs().argmax(dim=0, keepdim=True))
    coords = coords * torch.where(largest < 0, -1.0, 1.0)
    total = scatter.diagonal().sum()  # the sum of the variances: every eigenvalue's
    top = variance[[-1, -2]].clamp_min(0)
    return coords, top / total.clamp_min(torch.finfo(total.dtype).tiny)


class Embeddings(Probe):
    """`embeddings/explained_1|2` and the scatter every `every` steps; the last as `embeddings.png`."""

    def __init__(self, every: int | None = 100):
        super().__init__(every)
        self.last: tuple | None = None
        self.taken: int | None = (
            None  # the step of the latest snapshot, on every rank (rank 0 alone keeps `last`)
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.due(trainer.global_step):
            self.snapshot(trainer, pl_module, trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.taken != trainer.global_step:  # the same decision on every rank: a gather waits for all
            self.snapshot(trainer, pl_module, trainer.global_step)
        path = self.run.file("embeddings.png", plot=True)
        if trainer.is_global_zero and path and self.last is not None:
            from harness.probes.figures import embedding_figure, save_figure

            save_figure(embedding_figure(*self.figure_args()), path)

    @torch.no_grad()
    def snapshot(self, trainer, pl_module, step: int) -> None:
        embedding = getattr(pl_module.model, "token_embedding", None)
        if embedding is None or embedding.weight.shape[1] < 2:
            return
        weight, self.taken = embedding.weight, step
        if is_shard(weight):  # sharded: the whole matrix, gathered by every rank (one all-gather a snapshot)
            weight = weight.full_tensor()
        if not trainer.is_global_zero:
            return
        coords, explained = project(weight)
        explained = explained.tolist()
        self.last = (step, coords, explained)  # drawn at the end: the coordinates stay a tensor until then
        self.sink.add(step, {"embeddings/explained_1": explained[0], "embeddings/explained_2": explained[1]})
        if has_tracker(trainer):
            from harness.probes.figures import embedding_figure, to_rgb

            log_image(trainer, "embeddings", to_rgb(embedding_figure(*self.figure_args())), step)

    def figure_args(self) -> tuple:
        """The latest projection as embedding_figure takes it: coordinates, token labels, step, fractions."""
        step, coords, explained = self.last
        tokenizer = self.run.data.tokenizer
        labels = [visible_text(tokenizer.decode([i])) for i in range(len(coords))]
        return coords.tolist(), labels, step, explained
