"""The tasks a job runs, and what judges a whole config before any of them.

job.py        one Hydra job: the task its config names, its verdict, its exit code
training.py   the training task
rank_lost.py  a training run that lost a rank
evaluate.py   the mode=eval task
doctor.py     the experiment=doctor task
validate.py   `validate`: every rule of a config
targets.py    each part's target held to its signature at the door, nothing built"""
