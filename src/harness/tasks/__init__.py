"""The tasks a job runs, and what judges a whole config before any of them:

    job.py        one Hydra job: the task its config names, its verdict recorded whatever happens, its exit code
    training.py   training: data -> model -> preflight -> fit -> verdict.json (`run`, `train`)
    rank_lost.py  training on several processes that lost a rank: the watchdog it gives, the verdict it ends with
    evaluate.py   mode=eval (eval.py): a checkpoint measured, eval.json
    doctor.py     experiment=doctor: overfit runs of its own, then a diagnosis
    validate.py   the rules across parts, and the driver of every part's own rules: `validate`, the one entry
    try_build.py  what the config builds, built once at the command line (a library's refusal in one line)

Everything here may import every part below it (harness/__init__.py lists the layers); nothing below imports it."""
