"""The fast contract's Mamba-2 decode step on CUDA, in one Triton kernel: for each (sequence,
head, block of P rows) the state tile S [P_block, N] is read from the pool at the sequence's
slot, updated in registers, S = exp(dt A) S + dt x B^T, written back in place, and the output
y = S C + D x computed from it: one read and one write of the state per step, as engines'
selective-state-update kernels do (the torch form gathers, updates, scatters and reduces the
state in about seven passes). Fast contract only: its reduction over N follows the tile.
"""
import torch
import triton
import triton.language as tl

BLOCK_P = 16


@triton.jit
def _state_update_kernel(state, slots, x, b, c, dt, a, d, y, heads_per_group, P, N,
                         stride_slot, stride_head, stride_p, stride_xb, stride_xh, stride_bb, stride_bg,
                         stride_cb, stride_cg, stride_yb, stride_yh, stride_dtb,
                         BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    seq, head, block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    group = head // heads_per_group
    p = block * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_ok, n_ok = p < P, n < N
    slot = tl.load(slots + seq)
    step = tl.load(dt + seq * stride_dtb + head)
    decay = tl.exp(step * tl.load(a + head))
    xv = tl.load(x + seq * stride_xb + head * stride_xh + p, mask=p_ok, other=0.0).to(tl.float32)
    bv = tl.load(b + seq * stride_bb + group * stride_bg + n, mask=n_ok, other=0.0).to(tl.float32)
    cv = tl.load(c + seq * stride_cb + group * stride_cg + n, mask=n_ok, other=0.0).to(tl.float32)
    tile = state + slot * stride_slot + head * stride_head + p[:, None] * stride_p + n[None, :]
    ok = p_ok[:, None] & n_ok[None, :]
    s = tl.load(tile, mask=ok, other=0.0)
    s = s * decay + (step * xv)[:, None] * bv[None, :]
    tl.store(tile, s, mask=ok)
    out = tl.sum(s * cv[None, :], axis=1) + tl.load(d + head) * xv
    tl.store(y + seq * stride_yb + head * stride_yh + p, out, mask=p_ok)


def state_update(ssm, slots, x, B, C, dt, A, D) -> torch.Tensor:
    """One decode step of every sequence, in place on the pool `ssm` [slots, H, P, N] fp32 at
    rows `slots` [b]; x [b, H, P], B and C [b, G, N], dt [b, H] fp32, A and D [H]; y [b, H, P]
    fp32."""
    count, heads, P = x.shape
    N, groups = ssm.shape[-1], B.shape[1]
    if ssm.dtype != torch.float32 or ssm.stride(-1) != 1 or B.stride(-1) != 1 or C.stride(-1) != 1:
        raise ValueError("state_update: an fp32 pool, and N contiguous in it and in B and C")
    x, dt = x.contiguous(), dt.float().contiguous()
    y = torch.empty(count, heads, P, dtype=torch.float32, device=x.device)
    grid = (count, heads, triton.cdiv(P, BLOCK_P))
    _state_update_kernel[grid](ssm, slots, x, B, C, dt, A.float().contiguous(), D.float().contiguous(), y,
                               heads // groups, P, N, ssm.stride(0), ssm.stride(1), ssm.stride(2),
                               x.stride(0), x.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                               y.stride(0), y.stride(1), dt.stride(0),
                               BLOCK_P=BLOCK_P, BLOCK_N=triton.next_power_of_2(N))
    return y
