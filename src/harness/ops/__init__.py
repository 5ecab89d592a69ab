"""Every custom tensor transformation, written twice (practice P5), and what watches a forward from inside.

twin.py           Twin: an operation written vectorized and as a plain loop, compared (`max_difference`)
attention.py      CausalAttention;   scans.py   the tanh and LSTM scans (the recurrent models' loops)
loss.py           the `loss` group's components: the one place training, checks, probes and eval take the loss
forward_calls.py  which module's forward is running, and the torch functions called inside it"""

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
