"""`Datapoints` (practice P1): a fixed set of examples decoded (input, target, prediction, loss) every K steps
to datapoints.jsonl and the trackers, plus greedy continuations on text. '·': unmasked, '░': padding."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from einops import rearrange

from harness.config.groups.probes import DatapointsKeys
from harness.data.batch import first_rows
from harness.probes.probe import Probe, checked_declared, due
from harness.probes.trackers import log_table, own_randomness
from harness.train.distributed.shard_sums import any_sharded

MASKED, PADDING = "·", "░"
VISIBLE = {"\n": "⏎", "\t": "⇥", "\r": "␍", "\x7f": "␡"}
COLUMNS = ["step", "split", "index", "input", "target", "prediction", "loss"]


def visible_text(text: str) -> str:
    """`text` with every control character shown as a visible symbol ('⏎', '⇥', U+2400 pictures)."""
    return "".join(VISIBLE.get(c, chr(0x2400 + ord(c)) if ord(c) < 0x20 else c) for c in text)


def _token_texts(tokenizer) -> list[str]:
    """Each token id's decoded text, made visible; the padding id (if any) as '░'."""
    texts = [visible_text(tokenizer.decode([i])) for i in range(tokenizer.vocab_size)]
    pad = getattr(tokenizer, "pad_id", None)
    if pad is not None:
        texts[pad] = PADDING
    return texts


def _render(texts: list[str], ids: list[int], mask: list[bool] | None = None) -> str:
    """`ids` decoded token by token through `texts` (position t stays token t), '·' where `mask` is False."""
    if mask is None:
        return "".join(texts[i] for i in ids)
    return "".join(texts[i] if keep else MASKED for i, keep in zip(ids, mask, strict=True))


def first_examples_batch(data, split: str, count: int) -> dict[str, torch.Tensor] | None:
    """The first `count` examples of `data`'s split as one batch, collated by its own loader; None where it
    holds none."""
    batch = first_rows(data, split, count)
    return None if batch is None else {key: batch[key] for key in ("input_ids", "targets", "loss_mask")}


def _stacked_padded(batches: list[dict[str, torch.Tensor]], pad: int) -> dict[str, torch.Tensor]:
    """`batches` stacked into one, a narrower one padded on the right with `pad` outside the loss mask."""
    width = max(b["input_ids"].shape[1] for b in batches)
    out = {}
    for key in batches[0]:
        fill = False if key == "loss_mask" else pad
        out[key] = torch.cat([F.pad(b[key], (0, width - b[key].shape[1]), value=fill) for b in batches])
    return out


@torch.no_grad()
def _greedy_continuation(model, prompt: torch.Tensor, tokens: int, window: int) -> torch.Tensor:
    """Long[b, tokens]: the argmax continuation of `prompt` [b, time], the model seeing the last `window`
    tokens."""
    ids = prompt
    for _ in range(tokens):
        next_token = model(ids[:, -window:])[:, -1].argmax(dim=-1)
        ids = torch.cat([ids, rearrange(next_token, "b -> b 1")], dim=1)
    return ids[:, prompt.shape[1] :]


class Datapoints(Probe):
    """The first `examples` training and validation examples decoded every `every` steps; on text in
    mode=full, greedy continuations every `generate_every`."""

    def __init__(
        self,
        every: int | None = 100,
        examples: int = 4,
        prompts: int = 3,
        tokens: int = 32,
        generate_every: int = 1000,
    ):
        super().__init__(every)
        self.examples = checked_declared(DatapointsKeys, "examples", examples)
        self.asked = checked_declared(DatapointsKeys, "prompts", prompts)
        self.tokens = checked_declared(DatapointsKeys, "tokens", tokens)
        self.generate_every = checked_declared(DatapointsKeys, "generate_every", generate_every)
        self.prompts = 0  # `asked` where the run generates (on_train_start)
        self.batches: dict[str, dict[str, torch.Tensor]] = {}
        self.batch: dict[str, torch.Tensor] = {}
        self.rows: list[tuple[str, int]] = []
        self.last_step: int | None = None
        self.texts: list[str] = []
        self.sharded = False

    def on_train_start(self, trainer, pl_module) -> None:
        # sharded (trainer=fsdp): a forward pass gathers each block from every rank, so every rank runs the same
        # passes on the same fixed examples, in step; rank 0 writes
        self.sharded = any_sharded(pl_module.parameters())
        data = self.run.data
        self.texts = _token_texts(data.tokenizer)
        train, val = data.train_dataset, data.val_dataset
        text = getattr(train, "task", None) == "lm"
        self.prompts = self.asked if text and not self.run.overfit else 0
        self.batches = {"train": first_examples_batch(data, "train", self.examples)}
        # overfit mode validates on the training examples: shown once
        if (
            val is not None
            and val is not train
            and (shown := first_examples_batch(data, "val", self.examples)) is not None
        ):
            self.batches["val"] = shown
        # every split's examples in one batch: one forward pass a dump
        self.rows = [(split, i) for split, b in self.batches.items() for i in range(len(b["input_ids"]))]
        self.batch = _stacked_padded(
            list(self.batches.values()), pad=getattr(data.tokenizer, "pad_id", None) or 0
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.due(step) or due(step, self.generate_every if self.prompts else None):
            self.dump(
                trainer, pl_module, step, examples=self.due(step), generate=due(step, self.generate_every)
            )

    def on_train_end(self, trainer, pl_module) -> None:
        if self.last_step != trainer.global_step:  # the trained model's predictions
            self.dump(trainer, pl_module, trainer.global_step, examples=True, generate=True)

    @torch.no_grad()
    def dump(self, trainer, pl_module, step: int, examples: bool = True, generate: bool = True) -> None:
        """Decode the fixed examples' predictions at `step`; written and logged on rank 0."""
        if not (trainer.is_global_zero or self.sharded) or not self.batches:
            return
        self.last_step = step
        model, device = pl_module.model, pl_module.device
        was_training = model.training
        model.eval()  # predictions without dropout; own_randomness leaves training's random stream alone
        rows = []
        try:
            with own_randomness(device):
                if examples:
                    rows += self.predict(model, device, step)
                if generate and self.prompts and self.tokens:
                    rows += self.continue_prompts(model, device, step)
        finally:
            model.train(was_training)
        if not trainer.is_global_zero:
            return
        path = self.run.file("datapoints.jsonl")
        if path is not None:
            with path.open("a") as f:
                f.writelines(
                    json.dumps(dict(zip(COLUMNS, row, strict=True)), ensure_ascii=False) + "\n"
                    for row in rows
                )
        log_table(trainer, "datapoints", COLUMNS, rows, step)

    def predict(self, model, device: torch.device, step: int) -> list[list]:
        batch = {k: v.to(device) for k, v in self.batch.items()}
        logits = model(batch["input_ids"])
        loss = self.run.loss.per_example(logits.float(), batch["targets"], batch["loss_mask"]).tolist()
        predictions = logits.argmax(dim=-1).tolist()
        ids, targets, masks = (self.batch[k].tolist() for k in ("input_ids", "targets", "loss_mask"))  # host
        return [
            [
                step,
                split,
                i,
                _render(self.texts, ids[row]),
                _render(self.texts, targets[row], masks[row]),
                _render(self.texts, predictions[row], masks[row]),
                round(loss[row], 6),
            ]
            for row, (split, i) in enumerate(self.rows)
        ]

    def continue_prompts(self, model, device: torch.device, step: int) -> list[list]:
        """The first half of the first `prompts` examples continued greedily, beside what the text says."""
        source = self.batches.get("val", self.batches["train"])
        ids = source["input_ids"][: self.prompts]
        half = ids.shape[1] // 2
        prompt = ids[:, :half].to(device)
        truth = torch.cat([ids[:, half:], source["targets"][: self.prompts, -1:]], dim=1)[:, : self.tokens]
        generated = _greedy_continuation(model, prompt, self.tokens, window=ids.shape[1]).tolist()
        texts = self.texts
        return [
            [step, "generate", i, _render(texts, p), _render(texts, t), _render(texts, g), None]
            for i, (p, t, g) in enumerate(zip(prompt.tolist(), truth.tolist(), generated, strict=True))
        ]
