"""The harness's config schema, registered wherever Hydra composes this config: conf/train.yaml's defaults start
from it (`train_schema`, `mode/<mode>_schema`). Hydra imports every module of the hydra_plugins package as it
starts, looking for plugins, before it reads conf/: train.py, a test, a benchmark or a notebook that composes the
config finds the schema there without importing anything of the harness first."""

from harness.config.schema import register

register()
