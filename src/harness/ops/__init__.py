"""The operations written twice (practice P5), the loss, and what watches a forward from inside.

twin.py           Twin and `max_difference` attention.py      CausalAttention;   scans.py   the tanh and LSTM
scans loss.py           the `loss` group's components and `loss_of` forward_calls.py  the module running, and
the torch functions called in it"""

from harness.ops.attention import CausalAttention
from harness.ops.loss import MaskedCrossEntropy
from harness.ops.scans import LSTMScan, TanhScan
from harness.ops.twin import Twin, max_difference, registered

__all__ = [
    "CausalAttention",
    "LSTMScan",
    "MaskedCrossEntropy",
    "TanhScan",
    "Twin",
    "max_difference",
    "registered",
]
