"""Reference of DeepSeek-V4's KV compressors (kernels/ops/window_compress/) in float64, over a
whole sequence at once and from the definition: window w's block is sum_j softmax_j(z) kv_j over
its slots (HCA: its m rows; CSA: window w-1's Ca half, none for w = 0, then window w's Cb half),
z = gate + position_bias[offset in the window]."""
import torch


def blocks(kv, gate, position_bias, *, rate: int, overlap: bool) -> torch.Tensor:
    """[T // rate, D] float64 for the complete windows of kv, gate [T, W]."""
    n = kv.shape[0] // rate
    kv64 = kv[:n * rate].double().reshape(n, rate, -1)
    z = (gate[:n * rate].double().reshape(n, rate, -1) + position_bias.double()[None])
    out = []
    for w in range(n):
        if overlap:
            dim = kv64.shape[-1] // 2
            slot_kv, slot_z = [kv64[w, :, dim:]], [z[w, :, dim:]]
            if w > 0:
                slot_kv.insert(0, kv64[w - 1, :, :dim])
                slot_z.insert(0, z[w - 1, :, :dim])
            slot_kv, slot_z = torch.cat(slot_kv), torch.cat(slot_z)
        else:
            slot_kv, slot_z = kv64[w], z[w]
        out.append((torch.softmax(slot_z, dim=0) * slot_kv).sum(dim=0))
    return torch.stack(out) if out else torch.zeros(0, kv.shape[-1] // (2 if overlap else 1), dtype=torch.float64)
