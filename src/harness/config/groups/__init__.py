"""Every config group's keys, declared once: each option a class, OPTIONS (conf/<group>/<option>.yaml -> its class).
`register` puts them in Hydra's ConfigStore as <group>/<option>_schema, which each yaml names first. No torch.

    model.py     transformer, rnn, lstm, gpt, hf
    data.py      the data sources, and the tokenizers
    optim.py     the optimizers, the schedule, the losses
    trainer.py   the Trainer, the loggers, callbacks, debug presets, perf, paths
    probes.py    the probes and their settings"""

from __future__ import annotations

import importlib
import warnings

#: the modules that declare groups' keys: module -> the config groups it declares (each module's OPTIONS, or
#: OPTIONS_<GROUP> where one module declares several groups)
DECLARING = {
    "harness.config.groups.model": ("model",),
    "harness.config.groups.probes": ("probes",),
    "harness.config.groups.data": ("data", "tokenizer"),
    "harness.config.groups.optim": ("optim", "schedule", "loss"),
    "harness.config.groups.trainer": ("trainer", "logger", "callbacks", "debug", "perf", "paths"),
}


def register(store) -> None:
    """Store each declared option in Hydra's ConfigStore `store`."""
    for module_name, groups in DECLARING.items():
        module = importlib.import_module(module_name)
        for group in groups:
            options = getattr(module, "OPTIONS" if len(groups) == 1 else f"OPTIONS_{group.upper()}")
            for option, schema in options.items():
                # an open mapping's class (trainer, callbacks: groups/trainer.py) subclasses dict, which OmegaConf warns of
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", r"Class `\w+` subclasses `Dict`", UserWarning)
                    store.store(group=group, name=f"{option}_schema", node=schema)
