"""Reference of DeepSeek-V4's hyper-connections (kernels/ops/hyper_connection/) in float64, from the
definition: the unweighted RMSNorm of the flattened streams, the projection, sigmoid / softmax heads,
Sinkhorn (columns first), the collapse sum_n pre_n stream_n and the mix post_k out + sum_j comb_jk stream_j."""
import torch


def mix_in(streams, fn, base, scale, *, hc_eps, norm_eps, sinkhorn_iters):
    num_tokens, n = streams.shape[:2]
    flat = streams.reshape(num_tokens, -1).double()
    normed = flat / torch.sqrt((flat * flat).mean(-1, keepdim=True) + norm_eps)
    pre_w, post_w, comb_w = (normed @ fn.double().T).split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.double().split([n, n, n * n])
    a_pre, a_post, a_comb = scale.double().unbind(0)
    pre = torch.sigmoid(pre_w * a_pre + pre_b) + hc_eps
    post = 2 * torch.sigmoid(post_w * a_post + post_b)
    comb = torch.softmax((comb_w * a_comb + comb_b).reshape(num_tokens, n, n), dim=-1) + hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    return (pre.unsqueeze(-1) * streams.double()).sum(dim=1), post, comb


def mix_out(streams, block_out, post, comb):
    return post.double().unsqueeze(-1) * block_out.double().unsqueeze(-2) + torch.einsum(
        "tjk,tjd->tkd", comb.double(), streams.double())


def head(streams, fn, base, scale, *, hc_eps, norm_eps):
    num_tokens = streams.shape[0]
    flat = streams.reshape(num_tokens, -1).double()
    normed = flat / torch.sqrt((flat * flat).mean(-1, keepdim=True) + norm_eps)
    pre = torch.sigmoid((normed @ fn.double().T) * scale.double() + base.double()) + hc_eps
    return (pre.unsqueeze(-1) * streams.double()).sum(dim=1)
