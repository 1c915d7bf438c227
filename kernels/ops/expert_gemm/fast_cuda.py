"""expert_gemm.fast on a Hopper GPU in bf16: torch._grouped_mm (cuBLAS/CUTLASS, as torchtitan's
MoE) for all experts in one launch each, the routing weight applied before down_proj. Pairs are
stably sorted by expert (forms.py), so each expert's rows are in routing order."""
import torch

from kernels.ops.expert_gemm.forms import _sorted_pairs


def grouped_mm_available(x) -> bool:
    """torch._grouped_mm runs bf16 on Hopper-class GPUs (torch >= 2.8)."""
    return (hasattr(torch, "_grouped_mm") and x.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(x.device) >= (9, 0))


def experts_fast(x, ids, weights, up, down, *, activation):
    """Weighted per-slot outputs [M, k, H] (experts_fast_loop's arithmetic) by grouped GEMMs."""
    top_k = ids.shape[1]
    order, starts, counts = _sorted_pairs(ids, up.shape[0])
    ends = starts + counts
    h = activation(torch._grouped_mm(x[order // top_k], up.transpose(1, 2), offs=ends))
    h = (h.float() * weights.flatten()[order, None]).to(x.dtype)
    y = torch._grouped_mm(h, down.transpose(1, 2), offs=ends)
    return y[torch.argsort(order)].view(ids.shape + (down.shape[1],))
