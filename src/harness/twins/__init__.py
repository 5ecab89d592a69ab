"""Every custom tensor transformation, written twice (practice P5). See `base.Twin`."""

from harness.twins.attention import CausalAttention
from harness.twins.base import Twin, max_difference, registered
from harness.twins.loss import MaskedCrossEntropy
from harness.twins.recurrent import LSTMScan, TanhScan

__all__ = [
    "CausalAttention",
    "LSTMScan",
    "MaskedCrossEntropy",
    "TanhScan",
    "Twin",
    "max_difference",
    "registered",
]
