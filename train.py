"""Train, or first check that training can work at all.

    python train.py mode=overfit n=2            # preflight checks, memorize 2 examples -> PASS/FAIL
    python train.py -m data.length=10,50,200    # a sweep; each job writes its verdict.json
    python train.py model=rnn                   # the simple substitute, one override away

Every option lives in conf/ (start with conf/train.yaml); the entry is harness.cli.main.
"""

from pathlib import Path

from harness.cli import main

if __name__ == "__main__":
    main(config_dir=Path(__file__).resolve().parent / "conf")
