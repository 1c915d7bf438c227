"""Consistent ops give the same bits whatever torch's intra-op thread count (an engine and a
trainer may run with different pools); torch's own lone-row reduction does not (negative
control: it splits a single output of >= 32768 elements across threads)."""
import os

import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.logprob.consistent import consistent as logprob_consistent
from kernels.ops.norm.consistent import consistent as norm_consistent
from kernels.ops.reduction import row_sum

THREAD_COUNTS = (1, 2, 4)


@pytest.fixture
def restore_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def _under_each_thread_count(compute):
    results = []
    for count in THREAD_COUNTS:
        torch.set_num_threads(count)
        results.append(compute())
    return results


def test_consistent_ops_ignore_the_thread_count(fresh_seed, restore_threads):
    generator = torch.Generator().manual_seed(fresh_seed)
    wide = torch.randn(1, 151936, generator=generator)
    x, w = torch.randn(3, 512, generator=generator), torch.randn(256, 512, generator=generator)
    hidden = torch.randn(1, 40000, generator=generator)
    target = torch.tensor([7])

    def compute():
        return (row_sum(wide), linear_consistent(x, w, row_multiple=8),
                logprob_consistent(wide, target, torch.ones(1)),
                norm_consistent(hidden, torch.ones(40000), eps=1e-6)[0])

    first, *others = _under_each_thread_count(compute)
    for count, result in zip(THREAD_COUNTS[1:], others):
        for name, a, b in zip(("row_sum", "linear", "logprob", "norm"), first, result):
            assert_bitwise_equal(a, b, f"{name}: 1 thread vs {count}, seed {fresh_seed}")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="n/a: one core, torch cannot split a reduction")
def test_plain_lone_row_sum_follows_the_thread_count(fresh_seed, restore_threads):
    generator = torch.Generator().manual_seed(fresh_seed)
    differing = 0
    for _ in range(20):
        row = torch.randn(1, 151936, generator=generator)
        one, two, _ = _under_each_thread_count(lambda: row.sum(dim=-1))
        differing += int(one.view(torch.int32) != two.view(torch.int32))
    print(f"plain sum of a lone 151936-wide row: {differing}/20 differ between 1 and 2 threads")
    assert differing > 0, f"negative control never differed, seed {fresh_seed}"
