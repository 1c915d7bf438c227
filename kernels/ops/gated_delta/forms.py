"""The gated delta rule in torch ops (the math: kernels/ops/gated_delta/__init__.py): rows made
fp32 and normalised, one chunk's outputs and end state (run in chunks by kernels/ops/chunk_scan.py;
padding rows have g = beta = 0), the one-step recurrence, and the state a sequence carries between
calls. The consistent and fast variants both run these."""
from dataclasses import dataclass

import torch

L2_EPS = 1e-6  # as flash-linear-attention's l2norm
KEPT = ("k", "c", "u", "w", "n")
"""What a row leaves for its chunk's later rows in the row kernel (triton.py): k [H, K], the chunk's
cumulative log decay c [H], the UT rows u [H, V] and w [H, K], and n = u - w S0 [H, V]."""


def kept_row_shapes(num_heads: int, key_dim: int, value_dim: int) -> tuple:
    """One kept row's tensor shapes, in KEPT's order (the row kernel's pools)."""
    return (num_heads, key_dim), (num_heads,), (num_heads, value_dim), (num_heads, key_dim), (num_heads, value_dim)


@dataclass(frozen=True)
class DeltaState:
    """What a sequence carries between calls: S [H, K, V] fp32 after `folded` rows, and the rows
    after them not folded yet (prepared q, k, v, g, beta; None when there are none)."""
    ssm: torch.Tensor
    folded: int = 0
    pending: tuple | None = None

    @staticmethod
    def empty(num_heads: int, key_dim: int, value_dim: int, device=None) -> "DeltaState":
        return DeltaState(torch.zeros(num_heads, key_dim, value_dim, dtype=torch.float32, device=device))


def each_alone(form, groups, states, *, chunk_size: int):
    """A one-sequence form (rows, state -> y, state after) over sequences, a call each: (y of every
    row in the groups' order, the states after): the many-sequence shape of a per-sequence form."""
    results = [form(*group, state, chunk_size=chunk_size) for group, state in zip(groups, states)]
    return torch.cat([y for y, _ in results]), [after for _, after in results]


def prepared(q, k, v, g, beta):
    """Rows as the rule reads them, fp32: q and k L2-normalised per head, q scaled by K^-1/2,
    q and k repeated to v's heads (grouped value heads), g and beta as given."""
    heads_per_key = v.shape[1] // k.shape[1]
    q, k = (t.float().repeat_interleave(heads_per_key, dim=1) for t in (q, k))
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + L2_EPS) * q.shape[-1] ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
    return q, k, v.float(), g.float(), beta.float()


def chunk(q, k, v, g, beta, state0):
    """One chunk of prepared rows [..., Q, H, *] from state0 [..., H, K, V]: (y [..., Q, H, V], end
    state). Leading dims are independent chunks (a batched decode re-plays one per sequence).
    The head-major rows are made contiguous first: every GEMM operand is then contiguous or the
    transpose of a contiguous tensor, so folding the leading dims into the batch is a view for
    one chunk and for many, and the BLAS sees each entry with one layout (a batch of 8 whose
    operands needed a copy took another kernel than one chunk alone, on an AMD EPYC's MKL)."""
    qh, kh, vh = (t.transpose(-3, -2).contiguous() for t in (q, k, v))  # [.., H, Q, K], [.., H, Q, K], [.., H, Q, V]
    gh, bh = g.transpose(-2, -1), beta.transpose(-2, -1)  # [.., H, Q]
    size = gh.shape[-1]
    cum = torch.cumsum(gh, dim=-1)
    later = torch.ones(size, size, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(later, float("-inf")).exp()  # [.., H, Qt, Qs]
    k_beta = kh * bh[..., None]
    system = (k_beta @ kh.transpose(-1, -2)) * decay  # its strict lower part is the UT system
    u = torch.linalg.solve_triangular(system, vh * bh[..., None], upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(system, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    v_new = u - w @ state0  # [.., H, Q, V]
    y = (qh * cum.exp()[..., None]) @ state0 + ((qh @ kh.transpose(-1, -2)) * decay) @ v_new
    to_end = (cum[..., -1:] - cum).exp()  # [.., H, Q]
    end = state0 * cum[..., -1].exp()[..., None, None] + (kh * to_end[..., None]).transpose(-1, -2) @ v_new
    return y.transpose(-3, -2), end


def step(q, k, v, g, beta, state):
    """One prepared row [..., H, *] by the recurrence: (y [..., H, V], the state after it).
    Leading dims are independent sequences (the engine's batched decode)."""
    decayed = state * g.exp()[..., None, None]
    delta = (v - (decayed * k[..., :, None]).sum(-2)) * beta[..., None]  # [.., H, V]
    after = decayed + k[..., :, None] * delta[..., None, :]
    return (after * q[..., :, None]).sum(-2), after
