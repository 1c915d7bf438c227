"""Gated activation SiLU(gate) * up (Qwen3's MLP), and the position-independent sigmoid.

Consistency: on CPU, torch's vectorized sigmoid/SiLU and the scalar loop for a tensor's tail round
differently, so an element's bits would follow its place in the flattened batch; exp and division
agree in both loops, so the consistent sigmoid is built from them. SiLU(gate) * up is rounded
once, from fp32. Reference: gates/reference/activation.py.
"""
from kernels.ops.activation import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
CALL_KEYWORDS = frozenset()
