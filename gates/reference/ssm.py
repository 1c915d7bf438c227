"""Float64 references for the Mamba-2 mixer pieces: the causal depthwise conv + SiLU, the
token-by-token state recurrence (the definition the chunked SSD form must agree with), and
the gated group RMSNorm."""
import torch


def conv_silu(xbc, weight, bias):
    """xbc [T, C] from position 0; weight [C, K]; returns silu(causal conv) [T, C]."""
    x, w, b = xbc.double(), weight.double(), bias.double()
    padded = torch.cat([x.new_zeros(w.shape[1] - 1, x.shape[1]), x])
    out = torch.stack([(padded[t:t + w.shape[1]].t() * w).sum(-1) + b for t in range(x.shape[0])])
    return out * torch.sigmoid(out)


def scan(x, B, C, dt_raw, dt_bias, A_log, D, dt_min=0.0):
    """x [T,H,P], B/C [T,G,N], dt_raw [T,H] -> y [T,H,P] by the recurrence, in float64."""
    dt = torch.nn.functional.softplus(dt_raw.double() + dt_bias.double()).clamp(min=dt_min)
    A = -torch.exp(A_log.double())
    heads_per_group = x.shape[1] // B.shape[1]
    Bh = B.double().repeat_interleave(heads_per_group, dim=1)
    Ch = C.double().repeat_interleave(heads_per_group, dim=1)
    state = torch.zeros(x.shape[1], x.shape[2], B.shape[2], dtype=torch.float64)
    outputs = []
    for t in range(x.shape[0]):
        state = (torch.exp(dt[t] * A)[:, None, None] * state
                 + (dt[t][:, None] * x[t].double())[:, :, None] * Bh[t][:, None, :])
        outputs.append((state * Ch[t][:, None, :]).sum(-1) + D.double()[:, None] * x[t].double())
    return torch.stack(outputs)


def gated_norm(y, z, w, eps, group_size):
    h = y.double() * torch.nn.functional.silu(z.double())
    grouped = h.reshape(*h.shape[:-1], -1, group_size)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    return normed.reshape(h.shape) * w.double()


def gate_after_norm(y, z, w, eps):
    """Gated DeltaNet's output norm per value head [..., V]: y / RMS(y) * w * silu(z), float64."""
    y64 = y.double()
    normed = y64 * torch.rsqrt(y64.pow(2).mean(-1, keepdim=True) + eps)
    return normed * w.double() * torch.nn.functional.silu(z.double())
