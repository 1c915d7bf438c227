"""sink_attention.consistent: fp32 products reduced over the last dim (D for the scores, the fixed
entry length L for the denominator and the output), so a query's bits depend on its own entries and
L alone; masked entries weigh exactly +0.0. On CUDA one Triton kernel for both runtimes (triton.py:
torch's CUDA reductions follow the whole shape)."""
from kernels.ops.sink_attention.forms import torch_form


def consistent(q, entries, valid, sinks, *, scale):
    """q [T, H, D], entries [T, L, D] (K = V), valid [T, L] bool, sinks [H] -> [T, H, D] in q's dtype."""
    if q.device.type == "cuda":
        import kernels.ops.sink_attention.triton as sink_attention_triton  # imports Triton: CUDA machines only
        return sink_attention_triton.consistent(q, entries, valid, sinks, scale=scale)
    return torch_form(q, entries, valid, sinks, scale=scale)
