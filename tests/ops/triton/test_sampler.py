"""Logic tests of the consistent sampler's fused draw (kernels/ops/sampler/triton.py) on CPU
through the Triton interpreter: the Gumbel argmax is the torch formula's token, ignores the
batch and the chunk split, and greedy rows take torch.argmax's token. They prove logic, not GPU
bits: benchmarks/gpu_kernel_check.py checks the bits on the device. The checks (check_*) run in
a child pytest with TRITON_INTERPRET=1 (tests/ops/triton/interpreter.py says why).
Negative control: noise added to greedy rows is caught.
"""
import torch

from tests.ops.triton.interpreter import import_kernel, run_checks


def test_sampler_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (sampler) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


def check_gumbel_argmax_is_the_formula_and_ignores_the_batch(fresh_seed):
    """The consistent sampler's fused draw: each row's token scores the maximum of the torch
    formula x - log(-log u) over race_uniforms (within an ulp: the logs are numpy's here),
    dropped (-inf) tokens are never drawn, a row alone draws what it draws in a batch, and the
    chunk size (programs per row) never moves the token; a row with every token dropped draws 0."""
    kernel = import_kernel("sampler.triton")
    from kernels.ops.sampler.forms import mix_seed, race_uniforms
    gen = torch.Generator().manual_seed(fresh_seed)
    x = 3 * torch.randn(12, 2500, generator=gen)  # 2500: three blocks, the last one partial
    x[:, ::3] = float("-inf")  # as top-k/top-p drop tokens
    keys = torch.tensor([mix_seed(fresh_seed, i) for i in range(12)], dtype=torch.int64)
    drawn = kernel.gumbel_argmax(x, keys)
    scores = x.double() - torch.log(-torch.log(race_uniforms(keys, 2500).double()))
    best = scores.max(dim=-1).values
    chosen = scores.gather(1, drawn[:, None])[:, 0]
    assert bool((drawn % 3 != 0).all()), f"a dropped token was drawn, seed={fresh_seed}"
    assert float((best - chosen).abs().max()) <= 1e-5 * float(best.abs().max()), f"seed={fresh_seed}"
    for row in (0, 5, 11):
        assert int(kernel.gumbel_argmax(x[row:row + 1], keys[row:row + 1])) == int(drawn[row]), f"row {row}"
    for chunk in (1024, 2048):  # 3 and 2 chunks a row: the merge pass decides
        assert torch.equal(kernel.gumbel_argmax(x, keys, chunk=chunk), drawn), f"chunk {chunk}, seed={fresh_seed}"
    dropped = torch.full((2, 2500), float("-inf"))
    assert kernel.gumbel_argmax(dropped, keys[:2], chunk=1024).tolist() == [0, 0]


def check_gumbel_argmax_greedy_rows_are_torch_argmax(fresh_seed):
    """Greedy rows in the draw's launch take torch.argmax's token, ties to the lowest id (the
    ties are planted and proved present); the other rows draw what they draw without the
    greedy mask; a kernel that adds noise to greedy rows is caught (negative control)."""
    kernel = import_kernel("sampler.triton")
    from kernels.ops.sampler.forms import mix_seed
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(8, 2500, generator=gen)
    for row in range(0, 8, 2):  # a tie for the maximum in a later block and chunk than the first
        best = int(x[row].argmax())
        x[row, (best + 1500) % 2500] = x[row, best]
    ties = [int((x[row] == x[row].max()).sum()) for row in range(8)]
    assert all(ties[row] >= 2 for row in range(0, 8, 2)), f"no tie planted: {ties}"
    keys = torch.tensor([mix_seed(fresh_seed, i) for i in range(8)], dtype=torch.int64)
    greedy = torch.arange(8) % 2 == 0
    drawn = kernel.gumbel_argmax(x, keys, greedy, chunk=1024)
    assert torch.equal(drawn[greedy], x[greedy].argmax(dim=-1)), f"seed={fresh_seed}"
    assert torch.equal(drawn[~greedy], kernel.gumbel_argmax(x, keys, chunk=1024)[~greedy]), f"seed={fresh_seed}"
    noisy = kernel.gumbel_argmax(x, keys, torch.zeros(8, dtype=torch.bool), chunk=1024)
    assert not torch.equal(noisy[greedy], x[greedy].argmax(dim=-1)), f"noise on greedy rows passed, seed={fresh_seed}"
