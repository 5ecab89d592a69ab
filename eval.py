"""Evaluate a checkpoint: loss, perplexity, bits per token and per byte on the validation split, and a few
continuations decoded, in <run dir>/eval.json; the model, data and tokenizer are the checkpoint's own run's.

    python eval.py ckpt_path=last                       # the newest checkpoints/last.ckpt under outputs/runs/
    python eval.py ckpt_path=<run dir>/checkpoints/last.ckpt mode.samples=5

The same task as `python train.py mode=eval ...`. Every option lives in conf/ (conf/mode/eval.yaml)."""

from pathlib import Path

from harness.cli import main

if __name__ == "__main__":
    main(config_dir=Path(__file__).resolve().parent / "conf", mode="eval")
