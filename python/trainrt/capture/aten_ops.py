"""The complete ATen translation table: importing the op family modules registers their functions.

    from trainrt.capture.aten_ops import ATEN_OPS
    ATEN_OPS["aten.linear.default"]      # -> the function translating aten.linear.default
"""

from trainrt.capture import (  # noqa: F401  (importing registers the translations)
    ops_einsum, ops_factory, ops_loss, ops_math, ops_nn, ops_norm, ops_reduce, ops_rnn, ops_scan, ops_scatter, ops_sort,
    ops_experts, ops_shape)
from trainrt.capture import ops_pool, ops_random, ops_resize  # noqa: F401
from trainrt.capture.registry import ATEN_OPS  # noqa: F401  (re-exported)
from trainrt.capture import ops_conv  # noqa: F401,E402  (convolutions)
from trainrt.capture import ops_python  # noqa: F401,E402  (user autograd.Functions: PythonOp)
