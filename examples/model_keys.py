"""ConvLM's keys declared once (examples/model.py's model): each key's type, default, range and doc. No torch: the
door reads it before anything heavy. A fork lists this module in DECLARING (src/harness/config/groups/__init__.py)
and names `conv_schema` first in conf/model/conv.yaml's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.declare import key


@dataclass
class Conv:
    """model=conv: a causal convolutional LM (examples.model.ConvLM)."""

    _target_: str = "examples.model.ConvLM"
    d_model: int = key(64, "embedding and channel width", low=1, whole=True)
    layers: int = key(
        2, "convolution blocks; each widens the receptive field by kernel - 1 positions", low=1, whole=True
    )
    kernel: int = key(4, "taps of each causal convolution", low=1, whole=True)
    vectorize: bool = key(True, "false runs the CausalConv twin's loop version (slow, the spec)")


#: conf/model/<option>.yaml -> its declaration (ConfigStore: model/<option>_schema)
OPTIONS = {"conv": Conv}
