"""The consistent attention core's formula in torch ops, shared by the CPU path (consistent.py) and
the CUDA kernel's backward (triton.py), which differentiates it at the saved inputs."""
import torch


def torch_form(q, entries, valid, sinks, *, scale):
    """The formula in torch ops: the CPU's consistent path and the CUDA kernel's backward."""
    q32, kv32, sink32 = q.float(), entries.float(), sinks.float()[None, :]
    scores = (q32[:, :, None, :] * kv32[:, None, :, :]).sum(dim=-1) * scale  # [T, H, L]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    top = torch.maximum(scores.amax(dim=-1), sink32)  # [T, H]; a max is exact in any order
    weights = torch.exp(scores - top[..., None])
    total = weights.sum(dim=-1) + torch.exp(sink32 - top)
    p = weights / total[..., None]
    out = (p[:, :, None, :] * kv32.transpose(1, 2)[:, None, :, :]).sum(dim=-1)  # [T, H, D]
    return out.to(q.dtype)
