"""The consistent Mamba-2 one-row decode on CUDA: row t alone, with its block kernel's bits.

_chunk_outputs_kernel (triton.py) computes row t inside its BT-row block; each fp32
"ieee" tl.dot there is, per element, an FMA chain over k from its accumulator (or +0). These
kernels write those chains out for row t, masked terms included (fma(+0, 0, -0) = +0 can move a
sign): _decode_scores_kernel the scores C_t . B_s per (group, sequence), _decode_row_kernel the
weighted sum over s and C_t . S_start per (head, sequence, P-block), loading V values at a time,
consumed in order. Any launch has the same bits (benchmarks/gpu_ssm_decode.py). Imports Triton.
"""
import torch
import triton
import triton.language as tl

# P-block (capped at P), loop unroll, warps, V (values per vector load in the chains over n).
DECODE_ROW_LAUNCH = {"p_block": 64, "unroll": 1, "num_warps": 1, "vector": 4}


@triton.jit
def _chain_over_columns(acc, c_ptr, tile, V: tl.constexpr):
    """acc = fma(c[i], tile[:, i], acc) for i = 0 .. V-1 in order: a tile [R, V] of the next V
    terms of a chain over n, c_ptr at its first n. tl.split takes columns apart in registers."""
    rows: tl.constexpr = tile.shape[0]
    if V == 2:
        c0, c1 = tl.split(tile)
        acc = tl.fma(tl.load(c_ptr), c0, acc)
        acc = tl.fma(tl.load(c_ptr + 1), c1, acc)
    else:  # V == 4 (tile[r, 2a + b] at [r, a, b])
        even, odd = tl.split(tl.reshape(tile, (rows, 2, 2)))
        c0, c2 = tl.split(even)
        c1, c3 = tl.split(odd)
        acc = tl.fma(tl.load(c_ptr), c0, acc)
        acc = tl.fma(tl.load(c_ptr + 1), c1, acc)
        acc = tl.fma(tl.load(c_ptr + 2), c2, acc)
        acc = tl.fma(tl.load(c_ptr + 3), c3, acc)
    return acc


@triton.jit
def _decode_scores_kernel(b_ptr, c_ptr, scores_ptr, meta_ptr, num_groups, N: tl.constexpr, Q: tl.constexpr,
                          BT: tl.constexpr, V: tl.constexpr, UNROLL: tl.constexpr):
    """scores[seq, group, s] = C_t . B_s (tl.dot(ct, trans(bs))'s chain over n from +0) for every
    s in the BT-blocks up to row t's; B of a row after t loads as 0, as in the block kernel."""
    group, seq = tl.program_id(0), tl.program_id(1)
    base, t = tl.load(meta_ptr + seq * 5 + 0), tl.load(meta_ptr + seq * 5 + 2)
    c_row = c_ptr + ((base + t) * num_groups + group) * N
    k, v = tl.arange(0, BT), tl.arange(0, V)
    for s0 in range(0, (t // BT) * BT + BT, BT):
        s = s0 + k
        live = s <= t  # = s < num_rows: the rows after t are not there yet
        b_rows = b_ptr + ((base + s) * num_groups + group) * N
        scores = tl.zeros((BT,), dtype=tl.float32)
        for n0 in tl.range(0, N, V, loop_unroll_factor=UNROLL):
            tile = tl.load(b_rows[:, None] + n0 + v[None, :], mask=live[:, None], other=0.0)  # [BT, V]
            scores = _chain_over_columns(scores, c_row + n0, tile, V)
        tl.store(scores_ptr + (seq * num_groups + group) * Q + s, scores)


@triton.jit
def _decode_row_kernel(x_ptr, c_ptr, dt_ptr, cs_ptr, scores_ptr, state_ptr, d_ptr, y_ptr, meta_ptr, num_heads,
                       num_groups, heads_per_group, padded_rows, P: tl.constexpr, N: tl.constexpr, Q: tl.constexpr,
                       BT: tl.constexpr, P_BLOCK: tl.constexpr, V: tl.constexpr, UNROLL: tl.constexpr):
    """Row t's output for P_BLOCK of its P elements: the block kernel's weights for row t,
    tl.dot(weights, xs, acc)'s chain over the s of every block up to t's (the rows after t
    included, as exact zeros), then tl.dot(C_t, S_start)'s chain over n from +0."""
    head, seq, p_block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    group = head // heads_per_group
    base, t = tl.load(meta_ptr + seq * 5 + 0), tl.load(meta_ptr + seq * 5 + 2)
    state_index, out_row = tl.load(meta_ptr + seq * 5 + 3), tl.load(meta_ptr + seq * 5 + 4)
    cs_row = cs_ptr + (seq * num_heads + head) * padded_rows
    score_row = scores_ptr + (seq * num_groups + group) * Q
    p, v = p_block * P_BLOCK + tl.arange(0, P_BLOCK), tl.arange(0, V)
    cs_t = tl.load(cs_row + t)
    acc = tl.zeros((P_BLOCK,), dtype=tl.float32)
    for s in tl.range(0, (t // BT) * BT + BT, loop_unroll_factor=UNROLL):
        live = s <= t
        dt_s = tl.load(dt_ptr + (base + s) * num_heads + head, mask=live, other=0.0)
        weight = tl.where(live, tl.load(score_row + s) * tl.exp(cs_t - tl.load(cs_row + s)) * dt_s, 0.0)
        x_s = tl.load(x_ptr + ((base + s) * num_heads + head) * P + p, mask=p * 0 + s <= t, other=0.0)
        acc = tl.fma(weight, x_s, acc)
    c_row = c_ptr + ((base + t) * num_groups + group) * N
    start = state_ptr + (state_index * num_heads + head) * P * N + p[:, None] * N
    dotted = tl.zeros((P_BLOCK,), dtype=tl.float32)
    for n0 in tl.range(0, N, V, loop_unroll_factor=UNROLL):
        dotted = _chain_over_columns(dotted, c_row + n0, tl.load(start + n0 + v[None, :]), V)
    from_start = dotted * tl.exp(cs_t)
    xt = tl.load(x_ptr + ((base + t) * num_heads + head) * P + p)
    y = acc + from_start + tl.load(d_ptr + head) * xt
    tl.store(y_ptr + (out_row * num_heads + head) * P + p, y)


def decode_rows(rows, cs, state_pool, D, y, meta, *, block: int, launch: dict = DECODE_ROW_LAUNCH):
    """Each sequence's one new row's output into y [b, H, P]. rows = (x, B, C, dt) row pools
    flattened to [S * Q, ...]; cs [b, H, Q] their chunk cumsums; meta [b, 5] as
    triton.py's kernels read it; state_pool [S, H, P, N] the chunks' starts."""
    x, B, C, dt = rows
    num_heads, num_groups, head_dim, state_size = x.shape[1], B.shape[1], x.shape[2], B.shape[2]
    chunk_size, vector = cs.shape[-1], launch["vector"]
    if vector not in (2, 4):  # _chain_over_columns splits 2 or 4 columns
        raise ValueError(f"ssm decode launch: vector {vector} must be 2 or 4")
    num_sequences, p_block = meta.shape[0], min(launch["p_block"], head_dim)
    scores = torch.empty((num_sequences, num_groups, chunk_size), dtype=torch.float32, device=x.device)
    _decode_scores_kernel[(num_groups, num_sequences)](
        B, C, scores, meta, num_groups, N=state_size, Q=chunk_size, BT=block, V=vector, UNROLL=launch["unroll"],
        num_warps=1)
    _decode_row_kernel[(num_heads, num_sequences, head_dim // p_block)](
        x, C, dt, cs, scores, state_pool, D, y, meta, num_heads, num_groups, num_heads // num_groups, chunk_size,
        P=head_dim, N=state_size, Q=chunk_size, BT=block, P_BLOCK=p_block, V=vector, UNROLL=launch["unroll"],
        num_warps=launch["num_warps"])
