"""The walk every chunked state scan shares (ssm_scan, gated_delta): rows in chunks of Q from a
state, each chunk zero-padded to Q rows (one shape per call), the state kept at the last chunk
boundary and after the last row, and the rows a call scans after those a sequence kept."""
import torch

from kernels.ops.padding import pad_to_multiple


def run_chunks(chunk, rows, state0, chunk_size: int):
    """chunk(*a chunk's padded rows, state) -> (y, state after it), over `rows` from state0:
    (y of every row, the state at the last chunk boundary, the state after all rows)."""
    num_rows = rows[0].shape[0]
    outputs, boundary, end = [], state0, state0
    for lo in range(0, num_rows, chunk_size):
        y, end = chunk(*(pad_to_multiple(r[lo:lo + chunk_size], 0, chunk_size) for r in rows), boundary)
        outputs.append(y[:min(chunk_size, num_rows - lo)])
        if lo + chunk_size <= num_rows:
            boundary = end
    return torch.cat(outputs), boundary, end


def after_pending(pending, new):
    """The rows a call scans: the kept ones (None: none), then the new."""
    if pending is None:
        return new
    return type(new)(torch.cat([old, fresh]) for old, fresh in zip(pending, new))
