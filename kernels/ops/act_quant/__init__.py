"""W8A8 FP8 activations as the model meets them: a quantize-dequantize round trip of x behind a
straight-through estimator, so the GEMM regions after it stay as they are.

The format (none / fp8) is model semantics; the contract picks the arithmetic: scaled per token and
128-column block (1x128) when consistent, so a token's bits ignore the batch; per tensor when fast
(a token's bits then follow the batch). Reference: gates/reference/quant.py.
"""
from kernels.ops.act_quant import consistent, fast

VARIANTS = {"fast": fast.activation_fast, "consistent": consistent.activation_consistent}
CALL_KEYWORDS = {"fmt"}
