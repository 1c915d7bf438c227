"""How the Triton kernels' logic tests (tests/ops/triton/test_*.py) run on CPU under the Triton
interpreter, and the inputs more than one of those files builds.
(1) Interpreter mode is fixed when triton is first imported, so each file's checks (check_*) run
in a child pytest with TRITON_INTERPRET=1, started by its one test_ function through run_checks:
the rest of the suite never sees an interpreted Triton. (2) The interpreter's tl.dot is numpy's
BLAS matmul, whose bits for a row follow its slot in the tile; the GEMM, attention and SSM checks
swap in fixed_order_dot (in-order sum over k; fp32 by one FMA per k, as Triton lowers an "ieee"
dot). Slot independence of the GPU's MMA is benchmarks/gpu_kernel_check.py's job.
"""
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
DTYPES = (torch.float32, torch.float16)  # bf16 is broken in the interpreter
SSM = dict(heads=4, head_dim=16, groups=2, state=16, chunk=16, length=70)  # 70: four boundaries, ends mid-chunk


def run_checks(test_file, fresh_seed):
    """Runs the check_* functions of `test_file` (a test module's __file__) in a child pytest
    with TRITON_INTERPRET=1, from the repository root, replaying `fresh_seed`."""
    if importlib.util.find_spec("triton") is None:
        pytest.fail("triton is not installed: the Triton kernel checks cannot run; install the test extra "
                    "(pip install -e '.[test]')")
    env = dict(os.environ, TRITON_INTERPRET="1", BITWISE_SEED=str(fresh_seed))
    child = subprocess.run([sys.executable, "-m", "pytest", str(test_file), "-o", "python_functions=check_*",
                            "-p", "no:cacheprovider", "-q", "-s"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
    print(child.stdout[-6000:], child.stderr[-2000:])
    assert child.returncode == 0, (f"interpreter checks of {Path(test_file).relative_to(ROOT)} failed "
                                   f"(replay: BITWISE_SEED={fresh_seed}):\n"
                                   f"{child.stdout[-8000:]}\n{child.stderr[-2000:]}")


def import_kernel(name):
    """kernels.ops.<name>, imported only in the child (under the interpreter)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("check_* functions run under TRITON_INTERPRET=1 (the file's test_..._under_the_triton_interpreter)")
    return importlib.import_module(f"kernels.ops.{name}")


def fixed_order_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """d + [M, K] @ [K, N] in d's dtype, every product added to the accumulator in k order,
    as the GPU's MMA steps add k-chunks into the running accumulator (so a K loop's BLOCK_K
    does not regroup the sum: linear/cuda.py's table changes BLOCK_K with M)."""
    from triton.runtime.interpreter import TensorHandle, _interpreter
    acc_dtype = d.data.dtype
    a_data, b_data = a.data.astype(acc_dtype), b.data.astype(acc_dtype)
    out = d.data.copy()
    # fp32 operands: Triton lowers the dot to one fused multiply-add per k (no MMA); else MMA steps
    fused = a.data.dtype == np.float32 and b.data.dtype == np.float32 and acc_dtype == np.float32
    for k in range(a_data.shape[-1]):
        if fused:
            out = _interpreter.fma_fp32(*np.broadcast_arrays(a_data[:, k, None], b_data[None, k, :], out))
        else:
            out += a_data[:, k, None] * b_data[None, k, :]
    return TensorHandle(out, d.dtype.scalar)


def with_fixed_order_dot(name):
    """The kernel module, with the interpreter's tl.dot replaced by fixed_order_dot meanwhile
    (a generator: a fixture yields from it)."""
    module = import_kernel(name)
    from triton.runtime.interpreter import InterpreterBuilder
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InterpreterBuilder, "create_dot", fixed_order_dot)
        yield module


def pooled_store(conv_dim, kernel_size, dtype):
    """The engine's pooled Mamba store for the SSM shape (the scan's and the conv's batched decodes)."""
    from kernels.models.mamba_pool import PooledMambaStore
    s = SSM
    return PooledMambaStore(conv_rows=kernel_size - 1, conv_dim=conv_dim, num_heads=s["heads"],
                            head_dim=s["head_dim"], state_size=s["state"], num_groups=s["groups"],
                            chunk_size=s["chunk"], dtype=dtype)
