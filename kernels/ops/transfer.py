"""Host-to-device copies that do not make the host wait: a copy from pageable memory to a
CUDA device returns only once the stream has reached it, which would stall a host that is
preparing the next decode step while the GPU runs the current one (kernels/engine/engine.py).
"""
import torch


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """`tensor` (on the host) on `device`; for CUDA through page-locked memory and without
    waiting (torch's caching host allocator keeps the page until the copy has run)."""
    device = torch.device(device)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
