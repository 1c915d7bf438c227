"""Float64 reference of the Nemotron-H MoE forward: router -> choice by the unique key ->
experts -> combine.

scores = sigmoid(x @ w_router^T); the top_k experts by (scores + bias descending, expert id
ascending); weights = scaling * the unbiased chosen scores / (their sum + 1e-20);
out = sum_slots weight * down_e(relu(up_e(x))^2) + down_s(relu(up_s(x))^2).
`ids` may be passed to score the tested side's choice where a near tie in the key could
flip between its fp32 and this float64 arithmetic.
"""
import torch


def router(x, w, scoring="sigmoid"):
    """[M, H] x [E, H] -> scores [M, E]: sigmoid, sqrt(softplus) (DeepSeek-V4) or softmax (Qwen3.5)."""
    logits = x.double() @ w.double().T
    if scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    return torch.sigmoid(logits) if scoring == "sigmoid" else torch.sqrt(torch.nn.functional.softplus(logits))


def select(scores, bias, top_k):
    """Expert ids [M, k] by the unique key, slots in key order."""
    key = scores.double() + bias.double()
    return torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :top_k]


def routing_weights(scores, ids, scaling):
    """The unbiased scores of the chosen experts, renormalised to sum 1, times scaling."""
    chosen = scores.double().gather(1, ids)
    return chosen / (chosen.sum(dim=-1, keepdim=True) + 1e-20) * scaling


def slot_order_weights(scores, ids, scaling):
    """The contracts' routing weights: the chosen fp32 scores over their fp32 slot-order sum
    (+ 1e-20), times scaling, each step rounded to fp32 (what C04 checks hash_topk against)."""
    chosen = scores.float().gather(1, ids)
    return chosen / (_slot_order_sum(chosen).unsqueeze(-1) + 1e-20) * scaling


def expert(x, up, down):
    """down(relu(up(x))^2): [M, H] x [F, H] x [H, F] -> [M, H]."""
    h = torch.relu(x.double() @ up.double().T)
    return (h * h) @ down.double().T


def swiglu_expert(x, gate_up, down, limit):
    """DeepSeek-V4's expert: down(SiLU(min(g, L)) * clamp(u, -L, L)), [g | u] = gate_up(x), float64."""
    gate, up = (x.double() @ gate_up.double().T).chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    return (gate * torch.sigmoid(gate) * up.clamp(min=-limit, max=limit)) @ down.double().T


def moe(x, router_w, bias, up, down, shared_up, shared_down, *, top_k, scaling, ids=None):
    """The whole MoE layer on x [M, H] in float64 -> [M, H]."""
    scores = router(x, router_w)
    ids = select(scores, bias, top_k) if ids is None else ids
    weights = routing_weights(scores, ids, scaling)  # [M, k]
    out = expert(x, shared_up, shared_down)
    for slot in range(ids.shape[1]):
        for e in ids[:, slot].unique().tolist():
            rows = (ids[:, slot] == e).nonzero(as_tuple=True)[0]
            out[rows] += weights[rows, slot, None] * expert(x[rows], up[e], down[e])
    return out


def slot_order_combine(slots, weights, shared):
    """The contracts' combine order: fp32 w_0*y_0 + w_1*y_1 + ... in slot order, + shared, one
    rounding to the slots' dtype (what C04 checks moe_combine against)."""
    weighted = slots.float() * weights.float().unsqueeze(-1)
    return (_slot_order_sum(weighted) + shared.float()).to(slots.dtype)


def _slot_order_sum(columns):
    """x[:, 0] + x[:, 1] + ... in fp32, left to right: the contracts' order over MoE slots."""
    total = columns[:, 0]
    for slot in range(1, columns.shape[1]):
        total = total + columns[:, slot]
    return total
