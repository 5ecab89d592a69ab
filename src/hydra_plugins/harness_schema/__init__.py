"""Registers the harness's config schema (harness.config.schema) wherever Hydra composes this config: Hydra imports
every hydra_plugins module as it starts, before it reads conf/, so anything that composes it finds the schema."""

from harness.config.schema import register

register()
