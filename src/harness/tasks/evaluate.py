"""The mode=eval task, `evaluate_task`: a checkpoint (loaded weights-only) measured on held-out data with the
model, data and tokenizer of the run that saved it, a few continuations decoded. Writes eval.json (loss,
perplexity, bits per token and byte, continuations) and a DONE verdict."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config import build
from harness.data.batch import first_rows, to_device, training_mode
from harness.errors import ConfigError
from harness.ops.loss import Loss, loss_of
from harness.report.verdict import Verdict
from harness.train.checkpoints import find_checkpoint, load_checked

log = logging.getLogger(__name__)


def _trained_config(cfg: DictConfig, ckpt: Path) -> DictConfig:
    """`cfg` with the model, data, tokenizer and loss of the run that saved `ckpt`, where its config is still beside
    it; else `cfg`."""
    saved = ckpt.parent.parent / ".hydra" / "config.yaml"
    if not saved.is_file():
        log.warning("no %s: evaluating with this run's model and data config", saved)
        return cfg
    try:
        trained = OmegaConf.load(saved)
        if not isinstance(trained, DictConfig) or not isinstance(trained.get("model"), DictConfig):
            raise TypeError("no model config in it")
    except Exception as err:  # damaged YAML, not UTF-8, not a run's config
        raise ConfigError(
            "ckpt_path",
            str(ckpt),
            f"the config of the run that saved it, {saved}, cannot be read ({type(err).__name__}); restore it, "
            "or copy the checkpoint out of its run dir to evaluate it with this command's model and data",
        ) from None
    merged = cfg.copy()
    with open_dict(merged):
        for key in ("model", "data", "tokenizer", "loss"):
            if key in trained:
                merged[key] = trained[key]
    return merged


def _load_weights(model: torch.nn.Module, ckpt: Path) -> None:
    """The checkpoint's weights into `model` (the LightningModule's `model.` tensors), weights-only."""
    ours = {f"model.{k}": v for k, v in model.state_dict().items()}
    state = load_checked(str(ckpt), ours, "evaluate it with the config it was trained with")
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})


@torch.no_grad()
def measure(model: torch.nn.Module, loader, tokenizer, lm: bool, loss: Loss) -> dict:
    """Over every batch's loss mask: the mean `loss` and cross entropy (nll, perplexity, bits per token), the
    tokens counted and, where `lm`, bits per byte (which compares tokenizers fairly)."""
    objective, nats, tokens, text_bytes = 0.0, 0.0, 0, 0
    for batch in loader:
        batch = to_device(batch, next(model.parameters()).device)
        logits, targets, mask = model(batch["input_ids"]).float(), batch["targets"], batch["loss_mask"]
        objective += loss.per_position(logits, targets, mask)[mask].sum().item()
        nats += loss.nll(logits, targets, mask)[mask].sum().item()
        tokens += int(mask.sum())
        if lm:  # the bytes of the targets the loss counts (padding left out)
            text_bytes += sum(
                len(tokenizer.decode(row[keep].tolist()).encode())
                for row, keep in zip(targets, mask, strict=True)
            )
    nll = nats / max(tokens, 1)
    result = {
        "loss": objective / max(tokens, 1),
        "nll": nll,
        "perplexity": math.exp(min(nll, 700)),
        "bits_per_token": nll / math.log(2),
        "tokens": tokens,
    }
    if lm and text_bytes:
        result["bits_per_byte"] = nats / math.log(2) / text_bytes
    return result


@torch.no_grad()
def _continue_text(model, prompt: torch.Tensor, new_tokens: int, context: int, temperature: float, generator):
    """The `new_tokens` tokens after `prompt`, greedy at temperature 0, else sampled; the model sees `context`."""
    ids = prompt[None]
    for _ in range(new_tokens):
        logits = model(ids[:, -context:])[0, -1].float()
        if temperature == 0:
            token = logits.argmax()
        else:
            token = torch.multinomial((logits / temperature).softmax(-1).cpu(), 1, generator=generator)[0]
        ids = torch.cat([ids, token.reshape(1, 1).to(ids.device)], dim=1)
    return ids[0, prompt.numel() :]


def continuations(model, data, tokenizer, cfg: DictConfig) -> list[dict]:
    """For the first `mode.samples` validation examples (padding cut): the first half as prompt, then a greedy and a
    sampled continuation, decoded."""
    mode, out = cfg.mode, []
    generator = torch.Generator().manual_seed(int(cfg.seed))
    device = next(model.parameters()).device
    rows = first_rows(data, "val", mode.samples) if mode.samples else None
    for i in range(0 if rows is None else len(rows["input_ids"])):
        real = rows["loss_mask"][i].nonzero()
        ids = rows["input_ids"][i, : int(real.max()) + 1 if len(real) else None].to(device)
        prompt = ids[: max(1, ids.numel() // 2)]
        greedy = _continue_text(model, prompt, mode.new_tokens, ids.numel(), 0.0, generator)
        sampled = _continue_text(model, prompt, mode.new_tokens, ids.numel(), mode.temperature, generator)
        out.append(
            {
                "prompt": tokenizer.decode(prompt.tolist()),
                "greedy": tokenizer.decode(greedy.tolist()),
                "sampled": tokenizer.decode(sampled.tolist()),
            }
        )
    return out


def _results_table(results: dict) -> str:
    """`results` (split -> measure()) as a console table."""
    rows = [f"{'split':<6} {'loss':>8} {'ppl':>10} {'bits/tok':>9} {'bits/byte':>9} {'tokens':>9}"]
    for split, r in results.items():
        bpb = f"{r['bits_per_byte']:9.3f}" if "bits_per_byte" in r else f"{'-':>9}"
        rows.append(
            f"{split:<6} {r['loss']:8.4f} {r['perplexity']:10.2f} {r['bits_per_token']:9.3f} {bpb} {r['tokens']:9d}"
        )
    return "\n".join(rows)


def _device_for(trainer: DictConfig) -> torch.device:
    """Where the trainer config would train: CUDA for accelerator gpu/cuda/auto when there is one, else CPU."""
    wants_gpu = str(trainer.get("accelerator", "cpu")) in ("gpu", "cuda", "auto")
    return torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")


def evaluate(cfg: DictConfig, run_dir: Path, write: bool = True) -> Verdict:
    """mode=eval: checkpoint -> its config -> data -> weights -> eval.json (when `write`); returns the verdict."""
    started = time.perf_counter()
    torch.set_flush_denormal(bool(cfg.flush_denormal))
    ckpt = Path(find_checkpoint(cfg.ckpt_path, run_dir, cfg.paths.log_dir))
    cfg = _trained_config(cfg, ckpt)
    data = build(cfg.data, "data")
    data.prepare_data()
    data.setup("validate")
    model = build(cfg.model, "model", vocab_size=data.tokenizer.vocab_size)
    _load_weights(model, ckpt)
    model.to(_device_for(cfg.trainer))
    splits = {"val": data.val_dataloader()}
    if getattr(data, "test_dataset", None) is not None:
        splits["test"] = data.test_dataloader()
    with training_mode(model, False):
        first = first_rows(data, "val", 1)
        # more than one target an example: language modelling (classification has one, the label's)
        lm = first is not None and int(first["loss_mask"].sum()) > 1
        loss = loss_of(cfg)
        results = {
            split: measure(model, loader, data.tokenizer, lm, loss) for split, loader in splits.items()
        }
        samples = continuations(model, data, data.tokenizer, cfg)
    report = {"checkpoint": str(ckpt), **results["val"], "splits": results, "continuations": samples}
    # what a model that ignores context scores at best (data=corpus, data=hf; None for a stream)
    entropy = data.unigram_entropy() if hasattr(data, "unigram_entropy") else None
    if entropy is not None:
        report["unigram_entropy"] = entropy
    if write:
        (run_dir / "eval.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(_results_table(results))
    if "unigram_entropy" in report:
        print(f"unigram entropy of the training tokens: {report['unigram_entropy']:.4f} nats/token")
    for sample in samples[:2]:
        print(f"\n{sample['prompt']!r}\n  greedy:  {sample['greedy']!r}\n  sampled: {sample['sampled']!r}")
    verdict = Verdict(
        status="DONE",
        mode="eval",
        model=getattr(model, "architecture", type(model).__name__),
        data=cfg.data._target_.rpartition(".")[2],
        length=cfg.data.length,
        seed=cfg.seed,
        val_loss=results["val"]["loss"],
        run_dir=str(run_dir),
        seconds=round(time.perf_counter() - started, 3),
        checkpoint=str(ckpt),
    )
    log.info("DONE: %s evaluated, val loss %.4f: %s", ckpt, results["val"]["loss"], run_dir / "eval.json")
    return verdict


def evaluate_task(cfg: DictConfig, run_dir: Path) -> dict:
    """The mode=eval task: `evaluate`, eval.json and the verdict written by rank 0; returns the verdict as a dict."""
    from harness.ranks import global_rank

    writes = global_rank() == 0
    verdict = evaluate(cfg, run_dir, write=writes)
    if writes:
        verdict.write(run_dir)
    return verdict.as_dict()
