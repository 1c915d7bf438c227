"""C04's checks of DeepSeek-V4's selections (gates/test_c04_discrete.py runs them): the lightning
indexer's Top-K of compressed blocks and the hash router's weights. Inputs are crafted so that
the hazards occur (scores tied across the k-th visible block, +0.0 against -0.0 there, queries
that see fewer than k blocks, unseen blocks scoring above the seen; slot sums whose bits follow
the order) and counted before any output is trusted. The rules: the unique key (score desc,
position desc), the chosen blocks by position descending, -1 past them; weights over an fp32
slot-order sum. References: gates/reference/block_topk.py and moe.py."""
import torch

from gates.discrete_calls import check_equal, require, uses_region
from gates.hazards import HazardEvidence
from gates.inputs import fresh_seed, generator
from gates.reference import block_topk as ref_blocks
from gates.reference import moe as ref_moe

QUERIES, BLOCKS, LEVELS = 64, 20, 4


def crafted_block_scores(gen, top_k, rate):
    """(scores [Q, S] fp32, positions [Q]): scores on LEVELS levels whose lowest is a zero of
    either sign (a head weight below zero turns ReLU's 0 into -0.0); a quarter of the rows keep
    only two visible blocks above zero, so zeros of both signs straddle the k-th place."""
    positions = torch.randint(0, BLOCKS * rate + rate, (QUERIES,), generator=gen)
    scores = torch.randint(0, LEVELS, (QUERIES, BLOCKS), generator=gen).float() / 8 + 0.125
    zero = torch.rand(QUERIES, BLOCKS, generator=gen) < 0.3
    zero[: QUERIES // 4, 2:] = True
    signs = torch.where(torch.rand(QUERIES, BLOCKS, generator=gen) < 0.5, -1.0, 1.0)
    scores = torch.where(zero, signs * 0.0, scores)
    seen = ((positions + 1) // rate).clamp(max=BLOCKS)
    scores[torch.arange(BLOCKS)[None, :] >= seen[:, None]] += 1.0  # unseen blocks score highest
    return scores, positions


def block_evidence(scores, positions, top_k, rate) -> HazardEvidence:
    seen = ((positions + 1) // rate).clamp(max=BLOCKS)
    visible = torch.arange(BLOCKS)[None, :] < seen[:, None]
    ranked = torch.sort(scores.masked_fill(~visible, float("-inf")), dim=-1, descending=True).values
    many = seen > top_k
    kth, next_ = ranked[:, top_k - 1], ranked[:, top_k]
    zeros = visible & (scores == 0)
    both_zero_signs = (zeros & torch.signbit(scores)).any(dim=-1) & (zeros & ~torch.signbit(scores)).any(dim=-1)
    evidence = HazardEvidence()
    evidence.add("scores tied across the k-th visible block", int((many & (kth == next_)).sum()))
    evidence.add("+0.0 and -0.0 tied at the k-th visible block",
                 int((many & (kth == 0) & (next_ == 0) & both_zero_signs).sum()))
    evidence.add("queries seeing fewer than k blocks", int((seen < top_k).sum()))
    evidence.add("unseen blocks scoring above the seen", int((~visible & (scores > 1.0)).any(dim=-1).sum()))
    return evidence


def block_topk_ties(gate, facts):
    if not uses_region(gate, facts, "block_topk", "no lightning indexer selects compressed blocks"):
        return
    seed, top_k, rate = fresh_seed(), facts["index_topk"], facts["compress_rate_csa"]
    gate.inputs["block_topk"] = {"seed": seed, "scores": [QUERIES, BLOCKS], "top_k": top_k, "compress_rate": rate}
    scores, positions = crafted_block_scores(generator(seed), top_k, rate)
    require(gate, "block_topk", block_evidence(scores, positions, top_k, rate))
    call = {"kind": "block_topk", "top_k": top_k, "compress_rate": rate}
    outputs = (yield {"block_topk": (call, {"scores": scores, "positions": positions})})["block_topk"]
    check_equal(gate, "block_topk: every case chooses the same blocks", outputs)
    expected = ref_blocks.select(scores, positions, top_k=top_k, compress_rate=rate)
    check_equal(gate, "block_topk follows the unique key (score, then the larger position), blocks by position "
                "descending, -1 past them", outputs, (expected,))


def hash_weights_order(gate, facts):
    if not uses_region(gate, facts, "hash_topk", "no layer routes by a token -> experts table"):
        return
    seed, top_k, num_experts = fresh_seed(), facts["num_experts_per_tok"], facts["n_routed_experts"]
    gate.inputs["hash_topk"] = {"seed": seed, "scores": [QUERIES, num_experts], "top_k": top_k}
    gen = generator(seed)
    scores = torch.rand(QUERIES, num_experts, generator=gen) * 2
    ids = torch.rand(QUERIES, num_experts, generator=gen).argsort(dim=-1)[:, :top_k]  # a table's rows: any order
    scaling = facts["routed_scaling_factor"]
    expected = ref_moe.slot_order_weights(scores, ids, scaling)
    evidence = HazardEvidence()
    evidence.add("k >= 3 slots", int(top_k >= 3))
    reversed_sum = ref_moe.slot_order_weights(scores, ids.flip(1), scaling).flip(1)
    evidence.add("weights whose bits follow the slot order", int((reversed_sum != expected).sum()))
    require(gate, "hash_topk", evidence)
    call = {"kind": "hash_topk", "scaling": scaling}
    outputs = (yield {"hash_topk": (call, {"scores": scores, "ids": ids})})["hash_topk"]
    check_equal(gate, "hash_topk: every case gives the same weights", outputs)
    check_equal(gate, "hash_topk weighs the table's experts over an fp32 slot-order sum", outputs, (expected,))


CHECKS = (block_topk_ties, hash_weights_order)
