"""Gated activation SiLU(gate) * up (Qwen3's MLP), the sigmoid gate x * sigmoid(gate) (Qwen3.5's
attention output and shared-expert gates), and the position-independent sigmoid.

Consistency: on CPU, torch's vectorized sigmoid/SiLU and the scalar loop for a tensor's tail round
differently, so an element's bits would follow its place in the flattened batch; exp and division
agree in both loops, so the consistent sigmoid is built from them. SiLU(gate) * up is rounded
once, from fp32; so is x * sigmoid(gate), a gate of one column broadcast over x's.
Reference: gates/reference/activation.py.
"""
from kernels.ops.activation import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
SIGMOID_GATE = {"fast": fast.sigmoid_gate, "consistent": consistent.sigmoid_gate}
CALL_KEYWORDS = frozenset()
