"""Logic tests of the Triton kernels (kernels/ops/*/triton.py, kernels/ops/*_triton.py and their CUDA entries) under the
Triton interpreter, on CPU: each file runs its check_* functions in a child pytest (interpreter.py)."""
