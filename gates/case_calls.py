"""Calling one region's op as each case's runtime calls it: the engine cases over decode-sized
row pieces in inference mode (kernels/engine/engine.py), the trainer's scoring forward on the
whole batch without grad, its update with grad and inputs that require it. An op may pick its
kernel by the mode or the row count, so a gate that called it otherwise would judge another op.
On the CPU the two runtimes may also run different intra-op thread pools (thread_counts).
"""
import contextlib

import torch

from gates import device
from kernels.contract.regions import CASES

PIECES = (1, 3, 7, 2)  # engine rows per call, cycled: the batches decode and chunked prefill see


def _in_pieces(function, *tensors):
    """function over consecutive row pieces of the tensors; outputs concatenated per position."""
    outputs, row, index = [], 0, 0
    while row < tensors[0].shape[0]:
        size = PIECES[index % len(PIECES)]
        outputs.append(as_tuple(function(*(t[row:row + size] for t in tensors))))
        row, index = row + size, index + 1
    return tuple(torch.cat(parts) for parts in zip(*outputs))


def as_tuple(output):
    return tuple(output) if isinstance(output, (tuple, list)) else (output,)


def runtime_mode(case: str):
    """The autograd mode the runtime calls a case's ops in: the engine in inference mode
    (kernels/engine/engine.py), the trainer's scoring forward without grad, its update with
    grad. An op may pick its kernel by the mode (as activation.fast does on CUDA)."""
    if case.startswith("engine"):
        return torch.inference_mode()
    return torch.enable_grad() if case == "trainer_bwd" else torch.no_grad()


def per_case(contract, region, call, *tensors):
    """{case: outputs}: engine cases over row pieces, trainer cases over the whole batch
    (trainer_bwd with inputs that require grad), each in its runtime's autograd mode; run on
    the gates' device, outputs on the CPU."""
    tensors = tuple(device.place(t) for t in tensors)
    outputs = {}
    for case in CASES:
        op = contract.op(region, case)
        with runtime_mode(case):
            if case.startswith("engine"):
                outputs[case] = _in_pieces(lambda *ts: call(op, *ts), *tensors)
            else:
                inputs = [t.detach().clone().requires_grad_(case == "trainer_bwd" and t.is_floating_point())
                          for t in tensors]
                outputs[case] = tuple(t.detach() for t in as_tuple(call(op, *inputs)))
    return {case: tuple(t.detach().cpu() for t in out) for case, out in outputs.items()}


@contextlib.contextmanager
def intra_op_threads(count: int | None):
    """torch's intra-op thread count for the block (CPU ops may follow it), then restored;
    None leaves the pool as it is (thread_counts off the CPU)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(count or saved)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def side_threads(side: str):
    """intra_op_threads for one side's pool: "engine" takes thread_counts' first, any other its second."""
    engine, trainer = thread_counts()
    return intra_op_threads(engine if side == "engine" else trainer)


def thread_counts() -> tuple:
    """(one side, the other): an engine and a trainer may run different pools, so on the CPU
    one side runs on 1 intra-op thread and the other on at least 2; (None, None) elsewhere."""
    return (1, max(2, torch.get_num_threads())) if device.target() == "cpu" else (None, None)
