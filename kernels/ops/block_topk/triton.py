"""The indexer's block scores (block_score's consistent form) on CUDA, one Triton kernel for both runtimes.

score[t, s] = sum_h ReLU(q[t, h] . k[s]) * scale * w[t, h]. On CUDA torch picks a reduction's layout
from the whole shape, so consistent.py's `.sum(dim=-1)` would follow the number of queries and
blocks there. A program owns one query and BLOCK_S blocks: each dot is one tl.sum over BLOCK_D
(D padded with zeros), the heads added one at a time in order, so an entry's bits depend on its
own query row, key row and D alone: not the batch, not how many blocks the phase has. The
trainer reaches the indexer only through its Top-K (no gradient), so there is no backward.
Imports Triton: CUDA machines (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

BLOCK_S = 32


@triton.jit
def _head_term(q_ptr, w_ptr, keys, token, head, num_heads, head_dim, dims, in_dim, scale):
    """ReLU(q[token, head] . keys) * scale * w[token, head] for the program's blocks [BLOCK_S]."""
    q = tl.load(q_ptr + (token * num_heads + head) * head_dim + dims, mask=in_dim, other=0.0).to(tl.float32)
    weight = tl.load(w_ptr + token * num_heads + head).to(tl.float32)
    return tl.maximum(tl.sum(keys * q[None, :], axis=1), 0.0) * scale * weight


@triton.jit(do_not_specialize=["num_blocks"])
def _block_score_kernel(q_ptr, k_ptr, w_ptr, out_ptr, num_blocks, num_heads, head_dim, scale,
                        BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    blocks = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    in_dim = dims < head_dim
    keys = tl.load(k_ptr + blocks[:, None].to(tl.int64) * head_dim + dims[None, :],
                   mask=(blocks[:, None] < num_blocks) & in_dim[None, :], other=0.0).to(tl.float32)
    total = _head_term(q_ptr, w_ptr, keys, token, 0, num_heads, head_dim, dims, in_dim, scale)
    for head in range(1, num_heads):  # in order, head 0 first, as the torch form
        total += _head_term(q_ptr, w_ptr, keys, token, head, num_heads, head_dim, dims, in_dim, scale)
    tl.store(out_ptr + token * num_blocks + blocks, total, mask=blocks < num_blocks)


def score(q, keys, weights, *, scale):
    """q [T, H, D], keys [S, D], weights [T, H] -> [T, S] fp32."""
    tokens, heads, dim = q.shape
    if keys.dim() != 2 or keys.shape[1] != dim or weights.shape != (tokens, heads):
        raise ValueError(f"block_score: q {tuple(q.shape)}, keys {tuple(keys.shape)}, weights {tuple(weights.shape)}")
    out = torch.empty((tokens, keys.shape[0]), dtype=torch.float32, device=q.device)
    if out.numel():
        _block_score_kernel[(tokens, triton.cdiv(keys.shape[0], BLOCK_S))](
            q.contiguous(), keys.contiguous(), weights.float().contiguous(), out, keys.shape[0], heads, dim,
            float(scale), BLOCK_S=BLOCK_S, BLOCK_D=max(16, triton.next_power_of_2(dim)), num_warps=4)
    return out
