"""linear's fast variants: one BLAS call as an engine issues it (the kernel follows M), and
split-K for small batches as tuned GPU engines run decode."""
import torch
import torch.nn.functional as F

from kernels.ops.linear.forms import _blas


def fast(x, w, *, out_dtype=None):
    """Plain BLAS call, as an engine would issue it (the kernel follows M)."""
    return _blas(x, w, out_dtype)


def fast_split_k(x, w, *, split_k_below_rows: int, num_splits: int, out_dtype=None):
    """Split-K for small batches, as tuned GPU engines do for decode: K is cut into
    `num_splits` slices whose fp32 partials are summed as a pairwise tree, as a split-K reduce
    does; only when M < split_k_below_rows. A BLAS that blocks K at the slice width adds its
    blocks one after the other, so a sequential sum of the slices could equal the one-call
    product on such a machine; the tree does not. On CUDA, cuBLAS itself picks split-K (and
    every other tile choice) by shape, as tuned engines rely on: the emulation would only make
    the baseline slower, so it is cuBLAS."""
    num_rows, k_dim = x.shape[0], x.shape[-1]
    if num_rows >= split_k_below_rows or k_dim < num_splits or x.device.type == "cuda":
        return _blas(x, w, out_dtype)
    bounds = torch.linspace(0, k_dim, num_splits + 1).round().long().tolist()
    partials = [F.linear(x[..., lo:hi].float(), w[:, lo:hi].float()) for lo, hi in zip(bounds[:-1], bounds[1:])]
    while len(partials) > 1:
        pairs = [a + b for a, b in zip(partials[0::2], partials[1::2])]
        partials = pairs + partials[len(pairs) * 2:]
    return partials[0].to(out_dtype or x.dtype)
