"""Nemotron-H's shared expert, a relu^2 MLP: shared(x) = down(relu(up(x))^2).

Consistency: row-tiled GEMMs (linear.consistent), so a row's bits ignore the batch, and relu^2 in
fp32 rounded once (a bf16 value's square is exact in fp32). Reference: gates/reference/moe.py.
"""
from kernels.ops.relu2_mlp import consistent, fast

VARIANTS = {"fast": fast.shared_fast, "consistent": consistent.shared_consistent}
CALL_KEYWORDS = frozenset()
