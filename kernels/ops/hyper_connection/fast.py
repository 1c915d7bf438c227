"""hyper_connection's fast variants, as the reference implementation runs them: torch's mean and
sums over the streams, F.linear for the projection, the mixing as a matmul in the streams' dtype."""
import torch
import torch.nn.functional as F


def _mixes(streams, fn, norm_eps):
    flat = streams.reshape(streams.shape[0], -1).float()
    return F.linear(flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + norm_eps), fn.float())


def mix_in(streams, fn, base, scale, *, hc_eps, norm_eps, sinkhorn_iters):
    num_tokens, n = streams.shape[:2]
    pre_w, post_w, comb_w = _mixes(streams, fn, norm_eps).split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.float().split([n, n, n * n])
    a_pre, a_post, a_comb = scale.float().unbind(0)
    pre = torch.sigmoid(pre_w * a_pre + pre_b) + hc_eps
    post = 2 * torch.sigmoid(post_w * a_post + post_b)
    comb = torch.softmax((comb_w * a_comb + comb_b).reshape(num_tokens, n, n), dim=-1) + hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    return (pre.unsqueeze(-1) * streams).sum(dim=1).to(streams.dtype), post, comb


def mix_out(streams, block_out, post, comb):
    dtype = streams.dtype
    return post.to(dtype).unsqueeze(-1) * block_out.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2),
                                                                                  streams)


def head(streams, fn, base, scale, *, hc_eps, norm_eps):
    pre = torch.sigmoid(_mixes(streams, fn, norm_eps) * scale.float() + base.float()) + hc_eps
    return (pre.unsqueeze(-1) * streams).sum(dim=1).to(streams.dtype)
