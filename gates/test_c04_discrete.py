"""Gate C04: discrete choices & rounding.

Passes when every engine case (rows fed in decode-sized pieces) and every trainer case (the
whole batch), each in its runtime's autograd mode (the engine's inference mode, the trainer's
no-grad scoring and grad update), give identical choices and bits on crafted hazards that
each check proves present, and the choices follow the contract's rules: Top-K on exact ties
across the k-th place (ids by the unique key, lowest id first), the MoE combine with k >= 3
(fp32 sum in slot order, one rounding), the sampler on tied logits (a request's tokens ignore
the batch; greedy ties go to the lowest id; top-k keeps the lowest ids of a tie at the k-th
place), the FP8/NVFP4 weight, FP8 activation and FP8 KV round trips on signed zeros, E4M3
midpoints, values above 448 and block extremes that differ from block to block (FP8 equal to
the float64 reference's rounding), SiLU(gate)*up on random inputs, and DeepSeek-V4's
selections (gates/discrete_selection.py: the indexer's block Top-K by score then the larger
position, +0.0 tying -0.0, blocks by position descending; the hash router's weights over a
slot-order sum). A region the model does not use is an n/a condition (qwen3: topk,
moe_combine, weight/act quant; nemotron: mlp_act; both: block_topk, hash_topk). Every shipped
size runs (the cut; the quantized cut where the family ships one, whose config's formats the
calls must all cover), each size's conditions named by it. Negative control: the fast contract fails
it (torch.topk ties, batch-seeded sampler draws, a per-tensor activation scale), as do the
planted faults topk.planted_highest_id_wins, moe_combine.planted_reverse_order,
block_topk.planted_lowest_position_wins, block_topk.planted_zero_signs_ranked,
hash_topk.planted_reverse_order, sampler.planted_keeps_every_tie and activation.planted_inference_two_roundings (two
roundings in inference mode only). The inputs are crafted here; the contract's ops run in a
worker (gates/discrete_runs.py) that hands back their outputs as tensors, and this process,
which compares them and writes the verdict, loads no module of the code under test (a
condition).
"""
import torch

from gates.candidate import ask_once, check_judge_clean, confinement
from gates.conftest import SizedRecord
from gates.crafted import distinct_fp8_scales, fp8_crafted, sampler_inputs, tied_scores, tied_top_logits
from gates.discrete_calls import check_equal, require, run_all, subject_facts, uses_region
from gates.discrete_selection import CHECKS as SELECTION_CHECKS
from gates.hazards import HazardEvidence, VacuousGate, count_negative_zeros, count_topk_boundary_ties
from gates.inputs import fresh_seed, generator
from gates.reference import moe as ref_moe
from gates.reference import quant as ref_quant

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
NUM_ROWS = 64
CASES = ("engine_prefill", "engine_decode", "engine_graph", "trainer_fwd", "trainer_bwd")
"""kernels/contract/regions.py's cases, named here so the judge imports none of the kernels."""


def check_topk(gate, scores, bias, top_k, scaling):
    """Ties present, cases agree, ids follow the unique key (key desc, lowest id first): a
    check (see test_discrete_choices_and_rounding)."""
    evidence = HazardEvidence()
    evidence.add("exact ties across the k-th place", count_topk_boundary_ties(scores + bias, top_k))
    require(gate, "topk", evidence)
    call = {"kind": "topk", "top_k": top_k, "scaling": scaling}
    outputs = (yield {"topk": (call, {"scores": scores, "bias": bias})})["topk"]
    check_equal(gate, "topk ids, slot order and weights: every case gives the same bits", outputs)
    expected = ref_moe.select(scores, bias, top_k)
    wrong = {case: int((out[0] != expected).any(dim=-1).sum()) for case, out in outputs.items()}
    gate.check("topk ids and slot order follow the unique key (lowest id wins ties)",
               not any(wrong.values()), rows_differing=wrong, num_rows=scores.shape[0])


def topk_ties(gate, facts):
    if not uses_region(gate, facts, "topk", "a dense model routes nothing"):
        return
    seed, top_k, num_experts = fresh_seed(), facts["num_experts_per_tok"], facts["n_routed_experts"]
    gate.inputs["topk"] = {"seed": seed, "scores": [NUM_ROWS, num_experts], "top_k": top_k}
    scores, bias = tied_scores(generator(seed), NUM_ROWS, num_experts, top_k)
    yield from check_topk(gate, scores, bias, top_k, facts["routed_scaling_factor"])


def moe_combine_order(gate, facts):
    if not uses_region(gate, facts, "moe_combine", "a dense model combines no experts"):
        return
    seed, dtype = fresh_seed(), facts["dtype"]
    top_k, hidden = facts["num_experts_per_tok"], facts["hidden_size"]
    gate.inputs["moe_combine"] = {"seed": seed, "slot_outputs": [NUM_ROWS, top_k, hidden], "top_k": top_k}
    gen = generator(seed)
    slots = torch.randn(NUM_ROWS, top_k, hidden, generator=gen)
    weights = torch.rand(NUM_ROWS, top_k, generator=gen) * facts["routed_scaling_factor"]
    if top_k >= 3:  # half the rows: w_2*y_2 = -w_0*y_0, large, so the small slots' rounding follows the order
        slots[:NUM_ROWS // 2, 0] *= 2.0 ** 16
        slots[:NUM_ROWS // 2, 2], weights[:NUM_ROWS // 2, 2] = -slots[:NUM_ROWS // 2, 0], weights[:NUM_ROWS // 2, 0]
    slots, shared = slots.to(dtype), torch.randn(NUM_ROWS, hidden, generator=gen).to(dtype)
    ids = torch.rand(NUM_ROWS, facts["n_routed_experts"], generator=gen).argsort(dim=-1)[:, :top_k]
    expected = ref_moe.slot_order_combine(slots, weights, shared)
    evidence = HazardEvidence()
    evidence.add("k >= 3 slots", int(top_k >= 3))
    reversed_order = ref_moe.slot_order_combine(slots.flip(1), weights.flip(1), shared)
    evidence.add("elements whose bits follow the order", int((expected != reversed_order).sum()))
    require(gate, "moe_combine", evidence)
    tensors = {"slots": slots, "ids": ids, "weights": weights, "shared": shared}
    outputs = (yield {"moe_combine": ({"kind": "moe_combine"}, tensors)})["moe_combine"]
    check_equal(gate, "moe_combine: every case gives the same bits", outputs)
    check_equal(gate, "moe_combine sums the slots in slot order (fp32, one rounding)", outputs, expected)


def sampler_ignores_the_batch(gate, facts):
    seed, num_requests = fresh_seed(), 24
    gate.inputs["sampler"] = {"seed": seed, "logits": [num_requests, facts["vocab_size"]]}
    gen = generator(seed)
    logits, params, draws = sampler_inputs(gen, facts["vocab_size"], facts["dtype"], num_requests)
    greedy = [i for i, p in enumerate(params) if p["temperature"] == 0]
    top_k_rows = [i for i, p in enumerate(params) if p.get("top_k")]
    evidence = HazardEvidence()
    evidence.add("greedy rows with a tied maximum",
                 sum(int((logits[i] == logits[i].max()).sum() > 1) for i in greedy))
    evidence.add("top-k rows with ties across the k-th place",
                 count_topk_boundary_ties(logits[top_k_rows].float(), 50))
    require(gate, "sampler", evidence)
    order = torch.randperm(num_requests, generator=gen).tolist()
    batches = {"engine_prefill, all rows": [list(range(num_requests))],
               "engine_graph, reversed": [list(range(num_requests))[::-1]],
               "engine_decode, shuffled pieces of 5, 2, 7": [order[:5], order[5:7], order[7:14], order[14:]]}
    runs = [{"case": "engine_decode", "rows": [i]} for i in range(num_requests)]  # each request alone
    runs += [{"case": name.split(",")[0], "rows": rows} for name, pieces in batches.items() for rows in pieces]
    for run in runs:
        run["draws"] = [draws[i] for i in run["rows"]]
    answer = (yield {"sampler": ({"kind": "sampler", "params": params, "runs": runs}, {"logits": logits})})["sampler"]
    tokens = iter(answer[f"run{index}"] for index in range(len(runs)))
    alone = torch.cat([next(tokens) for _ in range(num_requests)])
    differing = {}
    for name, pieces in batches.items():
        drawn = torch.empty(num_requests, dtype=torch.long)
        for rows in pieces:
            drawn[rows] = next(tokens)
        differing[name] = int((drawn != alone).sum())
    gate.check("sampler: each request draws the same tokens alone and in any batch and case",
               not any(differing.values()), requests_differing=differing, num_requests=num_requests)
    lowest = [int((logits[i] == logits[i].max()).nonzero()[0]) for i in greedy]
    gate.check("sampler: greedy ties go to the lowest token id", alone[greedy].tolist() == lowest,
               chosen=alone[greedy].tolist(), lowest_ids=lowest)


TIE_GROUP, TIE_TOP_K, TIE_DRAWS = 4, 3, 32  # 4 tokens tied at the top, top-k 3: the highest id must go


def sampler_top_k_ties(gate, facts):
    """Rows whose TIE_GROUP best logits are exactly equal, sampled with top_k = TIE_GROUP - 1
    TIE_DRAWS times each in every case: the unique key keeps the lower ids, so the group's
    highest id is never drawn (each kept token has a third of the mass: a rule that keeps it
    instead, or keeps every tie, draws it with near certainty over 32 draws)."""
    seed, num_rows, vocab = fresh_seed(), 8, facts["vocab_size"]
    gate.inputs["sampler_top_k"] = {"seed": seed, "rows": num_rows, "tie_group": TIE_GROUP, "top_k": TIE_TOP_K,
                                    "draws": TIE_DRAWS}
    gen = generator(seed)
    logits, groups = tied_top_logits(gen, num_rows, vocab, TIE_GROUP, facts["dtype"])
    forbidden = groups.max(dim=1).values
    evidence = HazardEvidence()
    evidence.add("rows tied across the k-th place", count_topk_boundary_ties(logits.float(), TIE_TOP_K))
    require(gate, "sampler top-k", evidence)
    rows = torch.arange(num_rows).repeat_interleave(TIE_DRAWS)
    params = [{"temperature": 1.0, "top_k": TIE_TOP_K, "seed": int(torch.randint(2**62, (1,), generator=gen))}
              for _ in range(num_rows)]
    runs = [{"case": case, "rows": rows.tolist(), "draws": [d for _ in range(num_rows) for d in range(TIE_DRAWS)]}
            for case in CASES]
    call = {"kind": "sampler", "params": params, "runs": runs}
    tokens = (yield {"sampler_top_k": (call, {"logits": logits})})["sampler_top_k"]
    drawn_forbidden = {case: int((tokens[f"run{index}"] == forbidden[rows]).sum()) for index, case in enumerate(CASES)}
    gate.check("sampler: top-k keeps the lowest ids of a tie across the k-th place (unique key)",
               not any(drawn_forbidden.values()), draws_of_the_dropped_tie=drawn_forbidden,
               draws_per_case=num_rows * TIE_DRAWS)


def weight_and_activation_quant(gate, facts):
    if not uses_region(gate, facts, "weight_quant", "no quantized weights or activations in this family"):
        return
    seed, dtype = fresh_seed(), facts["dtype"]
    gate.inputs["quant"] = {"seed": seed, "x": [256, 256], "fp8_scale": 2.0}
    x = fp8_crafted(generator(seed), (256, 256), 2.0, dtype)
    evidence = HazardEvidence()
    evidence.add("-0.0 inputs", count_negative_zeros(x))
    evidence.add("|x| > 448", int((x.float().abs() > 448).sum()))
    for granularity in ("block_128x128", "block_1x128"):
        quotients = ref_quant.fp8_quantize(x, granularity).quotients
        midpoints = ref_quant.is_midpoint(quotients, ref_quant.e4m3_grid())
        evidence.add(f"E4M3 midpoints ({granularity})", int(midpoints.sum()))
        evidence.add(f"{granularity} scales other than the first", distinct_fp8_scales(x, granularity) - 1)
    require(gate, "quant", evidence)
    formats = (("weight_quant", "fp8", "block_128x128"), ("weight_quant", "nvfp4", None),
               ("act_quant", "fp8", "block_1x128"))
    answers = yield {f"quant {region} {fmt}": ({"kind": "quant", "region": region, "fmt": fmt},
                                               # a weight: one tensor
                                               {"x": x if region == "act_quant" else x.unsqueeze(0)})
                     for region, fmt, _ in formats}
    for region, fmt, granularity in formats:
        outputs = {case: tuple(t.reshape(x.shape) for t in out)
                   for case, out in answers[f"quant {region} {fmt}"].items()}
        check_equal(gate, f"{region} {fmt}: every case gives the same bits", outputs)
        if granularity:
            expected = ref_quant.to_output(ref_quant.fp8_quantize(x, granularity).dequantized, dtype)
            check_equal(gate, f"{region} {fmt}: equals the float64 reference's rounding", outputs, expected)


def fp8_kv_store(gate, facts):
    seed, dtype, length = fresh_seed(), facts["dtype"], 48
    heads, head_dim = facts["num_kv_heads"], facts["head_dim"]
    gate.inputs["fp8_kv"] = {"seed": seed, "kv": [length, heads, head_dim], "kv_cache_dtype": "fp8"}
    gen = generator(seed)
    k, v = (fp8_crafted(gen, (length, heads * head_dim), 1.0, torch.float32) for _ in range(2))
    k[::7, 5] = 1000.0 * torch.sign(torch.randn(len(k[::7]), generator=gen))  # beyond 448: saturates
    k, v = (t.reshape(length, heads, head_dim).to(dtype) for t in (k, v))
    grid, evidence = ref_quant.e4m3_grid(), HazardEvidence()
    evidence.add("-0.0 inputs", count_negative_zeros(k) + count_negative_zeros(v))
    evidence.add("|x| > 448", int((k.float().abs() > 448).sum()))
    evidence.add("E4M3 midpoints", int(ref_quant.is_midpoint(k, grid).sum() + ref_quant.is_midpoint(v, grid).sum()))
    require(gate, "fp8 kv", evidence)
    outputs = (yield {"fp8_kv": ({"kind": "kv_store"}, {"k": k, "v": v})})["fp8_kv"]  # chunks and decodes
    check_equal(gate, "fp8 kv store (engine paged, trainer transient): same bits", outputs)
    expected = tuple(ref_quant.to_output(ref_quant.round_to_grid(t.float(), grid, ref_quant.E4M3_SIGN)[1], dtype)
                     for t in (k, v))
    check_equal(gate, "fp8 kv store: equals the float64 reference's rounding (saturating)", outputs, expected)


def silu_mul_rounding(gate, facts):
    if not uses_region(gate, facts, "mlp_act", "its MLPs are relu^2, not SiLU(gate)*up"):
        return
    seed = fresh_seed()
    gate.inputs["mlp_act"] = {"seed": seed, "gate_up": [NUM_ROWS, facts["intermediate_size"]]}
    gate_in, up = (4 * torch.randn(2, NUM_ROWS, facts["intermediate_size"], generator=generator(seed))).to(
        facts["dtype"])
    outputs = (yield {"mlp_act": ({"kind": "mlp_act"}, {"gate_in": gate_in, "up": up})})["mlp_act"]
    check_equal(gate, "mlp_act SiLU(gate)*up: every case gives the same bits", outputs)


CHECKS = (topk_ties, moe_combine_order, sampler_ignores_the_batch, sampler_top_k_ties, weight_and_activation_quant,
          fp8_kv_store, silu_mul_rounding, *SELECTION_CHECKS)


def configured_quantization(facts) -> set:
    """(region, format) of every quantization the size's config names (none on an unquantized cut)."""
    named = {("weight_quant", facts[field]) for field in ("expert_quant", "mamba_proj_quant", "dense_quant")
             if facts.get(field) not in (None, "none")}
    w8a8 = "fp8" in (facts.get("mamba_proj_quant"), facts.get("dense_quant"))
    named |= {("act_quant", "fp8")} if w8a8 else set()
    return named | ({("kv_store", "fp8")} if facts.get("kv_cache_dtype") == "fp8" else set())


def run_checks(gate: SizedRecord) -> None:
    """Every check on one size: each crafts its inputs and counts their hazards here, yields its
    calls ({label: (call, tensors)}) and judges the outputs sent back; all the calls run in one
    worker. A check without its region records n/a; one whose inputs lack a hazard it claims
    records that failing condition and stops. On a quantized size, the calls must have covered
    every quantization its config names."""
    facts = subject_facts(gate)
    waiting, requests = [], {}
    for check in CHECKS:
        steps = check(gate, facts)
        try:
            asked = next(steps)
        except (StopIteration, VacuousGate):  # n/a, or a vacuous input: its condition is recorded
            continue
        waiting.append((steps, list(asked)))
        requests.update(asked)
    answers = run_all(gate, requests) if requests else {}
    for steps, labels in waiting:
        try:
            steps.send({label: answers[label] for label in labels})
        except StopIteration:
            pass
    check_quantization_covered(gate, facts, [call for call, _ in requests.values()])


def check_quantization_covered(gate, facts, calls) -> None:
    """On a size whose config quantizes, the condition that `calls` ran each of its formats."""
    named = configured_quantization(facts)
    if named:
        ran = {(call["region"], call["fmt"]) for call in calls if call["kind"] == "quant"}
        ran |= {("kv_store", "fp8")} if any(call["kind"] == "kv_store" for call in calls) else set()
        gate.check("the calls covered every quantization the config names", named <= ran,
                   named=sorted(map(list, named)), ran=sorted(map(list, ran)))


def test_discrete_choices_and_rounding(gate):
    """Every shipped size of the model (the cut; the quantized cut where the family ships one),
    each size's checks in one worker, conditions named by size."""
    sizes = ask_once("sizes", {"model": gate.model, "checkpoint": gate.checkpoint})["sizes"]
    gate.inputs = {"workers": confinement()}
    for size in sizes:
        run_checks(SizedRecord(gate, size))
    check_judge_clean(gate)
    gate.verdict()
