"""router.consistent: the fp32 GEMM in row tiles and the position-independent sigmoid."""
from kernels.ops.activation.consistent import position_independent_sigmoid
from kernels.ops.linear.consistent import consistent as linear_consistent


def router_consistent(x, w, *, row_multiple: int):
    """fp32 GEMM in row tiles, position-independent sigmoid: [M, E] fp32 scores."""
    logits = linear_consistent(x.float(), w.float(), row_multiple=row_multiple)
    return position_independent_sigmoid(logits)
