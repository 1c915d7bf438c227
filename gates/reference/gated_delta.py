"""Float64 reference for Gated DeltaNet's delta rule: the token-by-token recurrence (the
definition the chunked form must agree with), q and k L2-normalised, q scaled by K^-1/2."""
import torch


def delta_rule(q, k, v, g, beta, eps=1e-6):
    """q, k [T, Hk, K], v [T, H, V], g (log decay), beta [T, H] -> y [T, H, V] in float64."""
    heads_per_key = v.shape[1] // k.shape[1]
    q, k = (t.double().repeat_interleave(heads_per_key, dim=1) for t in (q, k))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + eps) / q.shape[-1] ** 0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + eps)
    v, g, beta = v.double(), g.double(), beta.double()
    state = torch.zeros(v.shape[1], k.shape[2], v.shape[2], dtype=torch.float64)
    outputs = []
    for t in range(v.shape[0]):
        state = state * torch.exp(g[t])[:, None, None]
        delta = (v[t] - torch.einsum("hk,hkv->hv", k[t], state)) * beta[t][:, None]
        state = state + k[t][:, :, None] * delta[:, None, :]
        outputs.append(torch.einsum("hk,hkv->hv", q[t], state))
    return torch.stack(outputs)


def gated_delta(q, k, v, a, b, A_log, dt_bias, eps=1e-6):
    """The layer's rule from its raw inputs: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)."""
    g = -torch.exp(A_log.double()) * torch.nn.functional.softplus(a.double() + dt_bias.double())
    return delta_rule(q, k, v, g, torch.sigmoid(b.double()), eps)
