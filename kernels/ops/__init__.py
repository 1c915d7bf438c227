"""Op families, one folder each (kernels/ops/<family>/: the variant table in __init__.py, the fast
variants in fast*.py, the consistent ones in consistent.py, shared torch forms in forms.py, CUDA
kernels in triton.py); the modules at this level are helpers families share. `kernels.ops.registry`
names the variants for the contract."""
from kernels.ops.vector_math import settle_vector_math

settle_vector_math()  # before any op of this process runs on several threads
