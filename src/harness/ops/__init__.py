"""Every custom tensor transformation, written twice (practice P5). See `base.Twin`."""

from harness.ops.attention import CausalAttention
from harness.ops.base import Twin, max_difference, registered
from harness.ops.loss import MaskedCrossEntropy
from harness.ops.recurrent import LSTMScan, TanhScan

__all__ = [
    "CausalAttention",
    "LSTMScan",
    "MaskedCrossEntropy",
    "TanhScan",
    "Twin",
    "max_difference",
    "registered",
]
