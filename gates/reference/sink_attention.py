"""Reference of DeepSeek-V4's attention core (kernels/ops/sink_attention/) in float64, each query
over its valid entries only: softmax of the scores with the head's sink joining the denominator."""
import torch


def attend(q, entries, valid, sinks, *, scale) -> torch.Tensor:
    """[T, H, D] float64."""
    out = []
    for t in range(q.shape[0]):
        kv = entries[t][valid[t]].double()  # [l, D]
        scores = q[t].double() @ kv.T * scale  # [H, l]
        logits = torch.cat([scores, sinks.double()[:, None]], dim=-1)
        probs = torch.softmax(logits, dim=-1)[:, :-1]
        out.append(probs @ kv)
    return torch.stack(out)
