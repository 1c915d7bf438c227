"""Token embedding lookup: a gather, no arithmetic, so one variant serves every case.

Each row is a bit-exact copy of a table row whatever the batch or phase, so both contracts
name the one variant, `embedding.lookup` (consistent.py).
"""
from kernels.ops.embedding import consistent

VARIANTS = {"lookup": consistent.lookup}
CALL_KEYWORDS = frozenset()
