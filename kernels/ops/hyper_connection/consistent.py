"""hyper_connection.consistent: the flattened streams' norm as norm.consistent's (no weight), the
projection by linear.consistent's row tiles, every sum over the N streams reduction.ordered_sum's,
the sigmoid from torch.exp (torch.sigmoid's vector and scalar loops round differently), so a
token's bits do not follow the batch; the mixing in fp32, one rounding."""
import torch

from kernels.ops.activation.consistent import position_independent_sigmoid
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.norm.consistent import rms_normalized
from kernels.ops.reduction import ordered_sum

ROW_TILE = 8


def _softmax_last(z):
    """Softmax over the last (stream) dim, the denominator summed in stream order."""
    e = torch.exp(z - z.amax(dim=-1, keepdim=True))
    return e / ordered_sum(e).unsqueeze(-1)


def _sinkhorn(comb, *, eps, iterations):
    """Columns, then (rows, columns) iterations - 1 times; each sum in stream order."""
    def columns(c):
        return c / (ordered_sum(c.transpose(1, 2)).unsqueeze(1) + eps)

    def rows(c):
        return c / (ordered_sum(c).unsqueeze(2) + eps)

    comb = columns(comb)
    for _ in range(iterations - 1):
        comb = columns(rows(comb))
    return comb


def _mixes(streams, fn, norm_eps):
    """The projection of the normed, flattened streams [T, rows of fn] in fp32, row-tiled."""
    flat = streams.reshape(streams.shape[0], -1).float()
    return linear_consistent(rms_normalized(flat, norm_eps), fn.float(), row_multiple=ROW_TILE)


def _collapsed(streams, pre):
    """sum_n pre_n stream_n in fp32, stream order, rounded once to the streams' dtype."""
    return ordered_sum((pre[:, :, None] * streams.float()).transpose(1, 2)).to(streams.dtype)


def mix_in(streams, fn, base, scale, *, hc_eps, norm_eps, sinkhorn_iters):
    """streams [T, N, D] -> (the block's input [T, D] in streams' dtype, post [T, N], comb [T, N, N] fp32)."""
    num_tokens, n = streams.shape[:2]
    mixes = _mixes(streams, fn, norm_eps)
    pre_w, post_w, comb_w = mixes.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.float().split([n, n, n * n])
    a_pre, a_post, a_comb = scale.float().unbind(0)
    pre = position_independent_sigmoid(pre_w * a_pre + pre_b) + hc_eps
    post = 2 * position_independent_sigmoid(post_w * a_post + post_b)
    comb = _softmax_last((comb_w * a_comb + comb_b).reshape(num_tokens, n, n)) + hc_eps
    comb = _sinkhorn(comb, eps=hc_eps, iterations=sinkhorn_iters)
    return _collapsed(streams, pre), post, comb


def head(streams, fn, base, scale, *, hc_eps, norm_eps):
    """The final collapse (HyperHead): streams [T, N, D] -> sum_n pre_n stream_n [T, D],
    pre = sigmoid(a m + b) + eps from fn [N, N*D], base [N], scale [1]."""
    pre = position_independent_sigmoid(_mixes(streams, fn, norm_eps) * scale.float() + base.float()) + hc_eps
    return _collapsed(streams, pre)


def mix_out(streams, block_out, post, comb):
    """stream'_k = post_k out + sum_j comb_jk stream_j in fp32 (stream order), rounded once."""
    s32, out32 = streams.float(), block_out.float()
    mixed = [post[:, k, None] * out32 + ordered_sum((comb[:, :, k, None] * s32).transpose(1, 2))
             for k in range(s32.shape[1])]
    return torch.stack(mixed, dim=1).to(streams.dtype)
