"""Zero padding up to a multiple along one dim: how the consistent ops keep a kernel's shape
(and so its reduction order) fixed whatever the batch. Padded entries are zeros, which the
callers either slice away (rows) or add as +0.0 (reduction tails)."""
import torch


def pad_to_multiple(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    """x with zeros appended along `dim` up to a multiple of `multiple` (no copy if it is)."""
    pad = -x.shape[dim] % multiple
    if pad == 0:
        return x
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, x.new_zeros(shape)], dim=dim)
