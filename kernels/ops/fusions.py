"""Region chains that run as one launch where the contract allows, with the bits of the links.

For each run of implementations it names, a fused function computes the bits they give called one
after another (each fused kernel's docstring says why). A chain fuses only where every link is
bound to those with no pinned constant; anything else (another variant, a planted fault, CPU
tensors, autograd recording: backward needs the links' own Functions) runs link by link, the fused
function returning None. Else it returns (output, links), each link's (region, args, kwargs,
output), so tracers see every region as if it had run alone (kernels/contract/dispatch.py).
The q/k norm + RoPE launch may also write the step's K/V (kv_write: the paged store's write_target),
a copy that attention's region would make: the store then skips it (PagedLayerKV.mark_written).
"""
from kernels.ops.autograd_use import records_graph

QK_NORM_ROPE = ("qk_norm", "rope")


def _qk_norm_rope(from_table: bool):
    def fused(q, k, q_weight, k_weight, positions, *, eps, theta, max_position, kv_write=None):
        if q.device.type != "cuda" or records_graph(q, k, q_weight, k_weight):
            return None
        from kernels.ops import qk_norm_rope_triton  # imports Triton: CUDA machines only
        from kernels.ops.rope.consistent import _device_table
        tables = {}
        if from_table:
            cos, sin = _device_table(float(theta), q.shape[-1], int(max_position), q.device)
            tables = {"cos_table": cos, "sin_table": sin}
        positions = positions.to(q.device)
        q_normed, k_normed, q_out, k_out = qk_norm_rope_triton.launch(q, k, q_weight, k_weight, positions, eps=eps,
                                                                      theta=float(theta), kv_write=kv_write,
                                                                      **tables)
        links = (("qk_norm", (q, q_weight), {"eps": eps}, (q_normed, None)),
                 ("qk_norm", (k, k_weight), {"eps": eps}, (k_normed, None)),
                 ("rope", (q_normed, k_normed, positions), {"theta": theta, "max_position": max_position},
                  (q_out, k_out)))
        return (q_out, k_out), links
    return fused


FUSED = {
    QK_NORM_ROPE: {("norm.consistent", "rope.consistent"): _qk_norm_rope(from_table=True),
                   ("norm.fast_fused", "rope.fast"): _qk_norm_rope(from_table=False)},
}


def fused_for(chain: tuple, bindings) -> object:
    """The fused function of `chain` for its links' bindings, or None."""
    if any(binding.constants for binding in bindings):
        return None
    return FUSED.get(chain, {}).get(tuple(binding.impl for binding in bindings))
