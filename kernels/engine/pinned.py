"""Host staging buffers for the decode graphs' inputs and outputs: page-locked where a CUDA
device exists, so a copy from them is asynchronous (a copy from pageable memory makes the
host wait until the stream reaches it), plain memory on CPU-only machines (the interpreter
tests drive the same code).
"""
import torch


def host_buffer(numel: int, dtype: torch.dtype, fill=0) -> torch.Tensor:
    """[numel] host tensor of `dtype`, filled with `fill`, pinned when CUDA is available."""
    return torch.full((numel,), fill, dtype=dtype, pin_memory=torch.cuda.is_available())
