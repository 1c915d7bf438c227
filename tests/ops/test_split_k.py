"""The fast contract's CPU split-K must differ from the one-call product on any BLAS: its
negative controls (C02, C03, our target's prompts among prompts) rest on it."""
import torch
import torch.nn.functional as F

from kernels.ops.linear.fast import fast, fast_split_k


def test_split_k_differs_from_a_blas_that_blocks_k_at_the_slice_width(fresh_seed):
    """A BLAS whose K block is the slice width (64 here) adds the slices' products one after
    the other: a sequential sum of the slices is what such a machine's one call returns. The
    split's tree sum must differ from it, and from this machine's one call."""
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = torch.randn(8, 256, generator=generator), torch.randn(512, 256, generator=generator)
    split = fast_split_k(x, w, split_k_below_rows=64, num_splits=4)
    blocked = sum((F.linear(x[:, lo:lo + 64], w[:, lo:lo + 64]) for lo in range(64, 256, 64)),
                  F.linear(x[:, :64], w[:, :64]))
    moved = {name: int((split.view(torch.int32) != other.view(torch.int32)).sum())
             for name, other in (("blocked BLAS", blocked), ("this BLAS", fast(x, w)))}
    print(f"split-K elements differing of {split.numel()}: {moved}")
    assert all(count > 0 for count in moved.values()), moved
    wide = fast_split_k(torch.cat([x] * 8), w, split_k_below_rows=64, num_splits=4)
    assert torch.equal(wide.view(torch.int32), fast(torch.cat([x] * 8), w).view(torch.int32))  # 64 rows: one call
