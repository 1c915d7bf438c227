"""Gate C04: discrete choices & rounding.

Passes when every engine case (rows fed in decode-sized pieces) and every trainer case (the
whole batch), each in its runtime's autograd mode (the engine's inference mode, the trainer's
no-grad scoring and grad update), give identical choices and bits on crafted hazards that
each check proves present, and the choices follow the contract's rules: Top-K on exact ties
across the k-th place (ids by the unique key, lowest id first), the MoE combine with k >= 3
(fp32 sum in slot order, one rounding), the sampler on tied logits (a request's tokens ignore
the batch; greedy ties go to the lowest id; top-k keeps the lowest ids of a tie at the k-th
place), the FP8/NVFP4 weight, FP8 activation and FP8 KV
round trips on signed zeros, E4M3 midpoints, values above 448 and block extremes that differ
from block to block (FP8 equal to the float64 reference's rounding), and SiLU(gate)*up on
random inputs. A region the model does not use is an n/a condition (qwen3: topk,
moe_combine, weight/act quant; nemotron: mlp_act). Negative control: the fast contract fails
it (torch.topk ties, batch-seeded sampler draws, a per-tensor activation scale), as do the
planted faults topk.planted_highest_id_wins, moe_combine.planted_reverse_order,
sampler.planted_keeps_every_tie and activation.planted_inference_two_roundings (two
roundings in inference mode only).
"""
import torch

from gates import device
from gates.compare import first_bit_difference
from gates.case_calls import as_tuple, per_case, runtime_mode
from gates.crafted import distinct_fp8_scales, fp8_crafted, sampler_inputs, tied_scores, tied_top_logits
from gates.hazards import HazardEvidence, count_negative_zeros, count_topk_boundary_ties
from gates.inputs import fresh_seed, generator
from gates.reference import moe as ref_moe
from gates.reference import quant as ref_quant
from gates.subject import subject_config
from kernels.contract import load_contract
from kernels.contract.regions import CASES
from kernels.engine.cache import PagedKVCache
from kernels.models.batch import Segment
from kernels.models.state import ContiguousKV
from kernels.ops.sampler import SamplingParams

NUM_ROWS = 64


def _config(gate):
    return subject_config(gate)


def _require_region(gate, config, region, why):
    """A region the model does not use: an n/a condition with the reason, then the test ends."""
    if region not in config.REGIONS:
        gate.check_n_a(region, reason := f"{gate.model} has no {region} region: {why}")
        gate.n_a(reason)


def _difference(actual, expected) -> str:
    """'identical', or the first differing element of each tensor pair that differs."""
    diffs = [first_bit_difference(a, e) for a, e in zip(as_tuple(actual), as_tuple(expected))]
    return "; ".join(str(d) for d in diffs if d is not None) or "identical"


def _check_equal(gate, name, outputs, expected=None):
    """One condition: every case's outputs carry the bits of `expected` (default trainer_fwd's)."""
    differences = {case: _difference(out, outputs["trainer_fwd"] if expected is None else expected)
                   for case, out in outputs.items()}
    gate.check(name, all(text == "identical" for text in differences.values()), **differences)


def _require(gate, what, evidence):
    """Every counted hazard must be present: recorded as a condition (a vacuous input fails the
    gate even if the test stops here), then HazardEvidence.require raises VacuousGate."""
    gate.check(f"{what}: the inputs hold the claimed hazards", all(evidence.counts.values()), **evidence.counts)
    evidence.require(*evidence.counts)


def check_topk(gate, contract, scores, bias, top_k, scaling):
    """Ties present, cases agree, ids follow the unique key (key desc, lowest id first)."""
    evidence = HazardEvidence()
    evidence.add("exact ties across the k-th place", count_topk_boundary_ties(scores + bias, top_k))
    _require(gate, "topk", evidence)
    outputs = per_case(contract, "topk", lambda op, s: op(s, device.place(bias), top_k=top_k, scaling=scaling), scores)
    _check_equal(gate, "topk ids, slot order and weights: every case gives the same bits", outputs)
    expected = ref_moe.select(scores, bias, top_k)
    wrong = {case: int((out[0] != expected).any(dim=-1).sum()) for case, out in outputs.items()}
    gate.check("topk ids and slot order follow the unique key (lowest id wins ties)",
               not any(wrong.values()), rows_differing=wrong, num_rows=scores.shape[0])


def test_topk_ties(gate):
    config = _config(gate)
    _require_region(gate, config, "topk", "a dense model routes nothing")
    seed, top_k, num_experts = fresh_seed(), config.num_experts_per_tok, config.n_routed_experts
    gate.inputs = {"seed": seed, "scores": [NUM_ROWS, num_experts], "top_k": top_k}
    scores, bias = tied_scores(generator(seed), NUM_ROWS, num_experts, top_k)
    check_topk(gate, load_contract(gate.contract), scores, bias, top_k, config.routed_scaling_factor)
    gate.verdict()


def _slot_order_combine(slots, weights, shared):
    """The contract's combine order: fp32 w_0*y_0 + w_1*y_1 + ... in slot order, + shared, one rounding."""
    weighted = slots.float() * weights.float().unsqueeze(-1)
    total = weighted[:, 0]
    for slot in range(1, slots.shape[1]):
        total = total + weighted[:, slot]
    return (total + shared.float()).to(slots.dtype)


def test_moe_combine_order(gate):
    config = _config(gate)
    _require_region(gate, config, "moe_combine", "a dense model combines no experts")
    seed, dtype = fresh_seed(), config.torch_dtype
    top_k, hidden = config.num_experts_per_tok, config.hidden_size
    gate.inputs = {"seed": seed, "slot_outputs": [NUM_ROWS, top_k, hidden], "top_k": top_k}
    gen = generator(seed)
    slots = torch.randn(NUM_ROWS, top_k, hidden, generator=gen)
    weights = torch.rand(NUM_ROWS, top_k, generator=gen) * config.routed_scaling_factor
    if top_k >= 3:  # half the rows: w_2*y_2 = -w_0*y_0, large, so the small slots' rounding follows the order
        slots[:NUM_ROWS // 2, 0] *= 2.0 ** 16
        slots[:NUM_ROWS // 2, 2], weights[:NUM_ROWS // 2, 2] = -slots[:NUM_ROWS // 2, 0], weights[:NUM_ROWS // 2, 0]
    slots, shared = slots.to(dtype), torch.randn(NUM_ROWS, hidden, generator=gen).to(dtype)
    ids = torch.rand(NUM_ROWS, config.n_routed_experts, generator=gen).argsort(dim=-1)[:, :top_k]
    expected = _slot_order_combine(slots, weights, shared)
    evidence = HazardEvidence()
    evidence.add("k >= 3 slots", int(top_k >= 3))
    reversed_order = _slot_order_combine(slots.flip(1), weights.flip(1), shared)
    evidence.add("elements whose bits follow the order", int((expected != reversed_order).sum()))
    _require(gate, "moe_combine", evidence)
    contract = load_contract(gate.contract)
    outputs = per_case(contract, "moe_combine", lambda op, s, i, w, sh: op(s, i, w, sh), slots, ids, weights, shared)
    _check_equal(gate, "moe_combine: every case gives the same bits", outputs)
    _check_equal(gate, "moe_combine sums the slots in slot order (fp32, one rounding)", outputs, expected)
    gate.verdict()


def test_sampler_ignores_the_batch(gate):
    config = _config(gate)
    seed, num_requests = fresh_seed(), 24
    gate.inputs = {"seed": seed, "logits": [num_requests, config.vocab_size]}
    gen = generator(seed)
    logits, params, draws = sampler_inputs(gen, config.vocab_size, config.torch_dtype, num_requests)
    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    top_k_rows = [i for i, p in enumerate(params) if p.top_k]
    evidence = HazardEvidence()
    evidence.add("greedy rows with a tied maximum",
                 sum(int((logits[i] == logits[i].max()).sum() > 1) for i in greedy))
    evidence.add("top-k rows with ties across the k-th place",
                 count_topk_boundary_ties(logits[top_k_rows].float(), 50))
    _require(gate, "sampler", evidence)
    contract = load_contract(gate.contract)

    def sample(case, rows):
        with runtime_mode(case):
            return contract.op("sampler", case)(device.place(logits[rows]), [params[i] for i in rows],
                                                [draws[i] for i in rows]).cpu()
    alone = torch.cat([sample("engine_decode", [i]) for i in range(num_requests)])
    order = torch.randperm(num_requests, generator=gen).tolist()
    batches = {"engine_prefill, all rows": [list(range(num_requests))],
               "engine_graph, reversed": [list(range(num_requests))[::-1]],
               "engine_decode, shuffled pieces of 5, 2, 7": [order[:5], order[5:7], order[7:14], order[14:]]}
    differing = {}
    for name, pieces in batches.items():
        case = name.split(",")[0]
        tokens = torch.empty(num_requests, dtype=torch.long)
        for rows in pieces:
            tokens[rows] = sample(case, rows)
        differing[name] = int((tokens != alone).sum())
    gate.check("sampler: each request draws the same tokens alone and in any batch and case",
               not any(differing.values()), requests_differing=differing, num_requests=num_requests)
    lowest = [int((logits[i] == logits[i].max()).nonzero()[0]) for i in greedy]
    gate.check("sampler: greedy ties go to the lowest token id", alone[greedy].tolist() == lowest,
               chosen=alone[greedy].tolist(), lowest_ids=lowest)
    gate.verdict()


TIE_GROUP, TIE_TOP_K, TIE_DRAWS = 4, 3, 32  # 4 tokens tied at the top, top-k 3: the highest id must go


def test_sampler_top_k_ties(gate):
    """Rows whose TIE_GROUP best logits are exactly equal, sampled with top_k = TIE_GROUP - 1
    TIE_DRAWS times each in every case: the unique key keeps the lower ids, so the group's
    highest id is never drawn (each kept token has a third of the mass: a rule that keeps it
    instead, or keeps every tie, draws it with near certainty over 32 draws)."""
    config = _config(gate)
    seed, num_rows, vocab = fresh_seed(), 8, config.vocab_size
    gate.inputs = {"seed": seed, "rows": num_rows, "tie_group": TIE_GROUP, "top_k": TIE_TOP_K, "draws": TIE_DRAWS}
    gen = generator(seed)
    logits, groups = tied_top_logits(gen, num_rows, vocab, TIE_GROUP, config.torch_dtype)
    forbidden = groups.max(dim=1).values
    evidence = HazardEvidence()
    evidence.add("rows tied across the k-th place", count_topk_boundary_ties(logits.float(), TIE_TOP_K))
    _require(gate, "sampler top-k", evidence)
    contract = load_contract(gate.contract)
    rows = torch.arange(num_rows).repeat_interleave(TIE_DRAWS)
    params = [SamplingParams(1.0, top_k=TIE_TOP_K, seed=int(torch.randint(2**62, (1,), generator=gen)))
              for _ in range(num_rows)]
    drawn_forbidden = {}
    for case in CASES:
        with runtime_mode(case):
            tokens = contract.op("sampler", case)(device.place(logits[rows]), [params[int(r)] for r in rows],
                                                  [d for _ in range(num_rows) for d in range(TIE_DRAWS)]).cpu()
        drawn_forbidden[case] = int((tokens == forbidden[rows]).sum())
    gate.check("sampler: top-k keeps the lowest ids of a tie across the k-th place (unique key)",
               not any(drawn_forbidden.values()), draws_of_the_dropped_tie=drawn_forbidden,
               draws_per_case=num_rows * TIE_DRAWS)
    gate.verdict()


def test_weight_and_activation_quant(gate):
    config = _config(gate)
    _require_region(gate, config, "weight_quant", "no quantized weights or activations in this family")
    seed, dtype = fresh_seed(), config.torch_dtype
    gate.inputs = {"seed": seed, "x": [256, 256], "fp8_scale": 2.0}
    x = fp8_crafted(generator(seed), (256, 256), 2.0, dtype)
    evidence = HazardEvidence()
    evidence.add("-0.0 inputs", count_negative_zeros(x))
    evidence.add("|x| > 448", int((x.float().abs() > 448).sum()))
    for granularity in ("block_128x128", "block_1x128"):
        quotients = ref_quant.fp8_quantize(x, granularity).quotients
        midpoints = ref_quant.is_midpoint(quotients, ref_quant.e4m3_grid())
        evidence.add(f"E4M3 midpoints ({granularity})", int(midpoints.sum()))
        evidence.add(f"{granularity} scales other than the first", distinct_fp8_scales(x, granularity) - 1)
    _require(gate, "quant", evidence)
    contract = load_contract(gate.contract)
    for region, fmt, granularity in (("weight_quant", "fp8", "block_128x128"), ("weight_quant", "nvfp4", None),
                                     ("act_quant", "fp8", "block_1x128")):
        rows = x if region == "act_quant" else x.unsqueeze(0)  # a weight is one tensor, not rows
        outputs = per_case(contract, region, lambda op, t: op(t, fmt=fmt), rows)
        outputs = {case: tuple(t.detach().reshape(x.shape) for t in out) for case, out in outputs.items()}
        _check_equal(gate, f"{region} {fmt}: every case gives the same bits", outputs)
        if granularity:
            expected = ref_quant.to_output(ref_quant.fp8_quantize(x, granularity).dequantized, dtype)
            _check_equal(gate, f"{region} {fmt}: equals the float64 reference's rounding", outputs, expected)
    gate.verdict()


def test_fp8_kv_store(gate):
    config = _config(gate)
    seed, dtype, length = fresh_seed(), config.torch_dtype, 48
    heads, head_dim = config.num_kv_heads, config.head_dim
    gate.inputs = {"seed": seed, "kv": [length, heads, head_dim], "kv_cache_dtype": "fp8"}
    gen = generator(seed)
    k, v = (fp8_crafted(gen, (length, heads * head_dim), 1.0, torch.float32) for _ in range(2))
    k[::7, 5] = 1000.0 * torch.sign(torch.randn(len(k[::7]), generator=gen))  # beyond 448: saturates
    k, v = (t.reshape(length, heads, head_dim).to(dtype) for t in (k, v))
    grid, evidence = ref_quant.e4m3_grid(), HazardEvidence()
    evidence.add("-0.0 inputs", count_negative_zeros(k) + count_negative_zeros(v))
    evidence.add("|x| > 448", int((k.float().abs() > 448).sum()))
    evidence.add("E4M3 midpoints", int(ref_quant.is_midpoint(k, grid).sum() + ref_quant.is_midpoint(v, grid).sum()))
    _require(gate, "fp8 kv", evidence)
    paged = PagedKVCache(num_layers=1, num_blocks=4, block_size=16, num_kv_heads=heads, head_dim=head_dim,
                         dtype=dtype, kv_format="fp8")
    paged.reserve(0, length)
    start = 0
    for size in (13, 1, 1, 20, 1, 12):  # a chunked prefill, decodes, another chunk
        paged.kv(0).write(Segment(0, start, size, 0, "engine_prefill"), k[start:start + size], v[start:start + size])
        start += size
    outputs = {"engine (paged store)": paged.kv(0).read(Segment(0, start - 1, 1, 0, "engine_decode"))}
    for case in ("trainer_fwd", "trainer_bwd"):
        store, grad = ContiguousKV("fp8"), case == "trainer_bwd"
        store.write(Segment(0, 0, length, 0, case), k.clone().requires_grad_(grad), v.clone().requires_grad_(grad))
        outputs[case] = tuple(t.detach() for t in store.read(Segment(0, 0, length, 0, case)))
    _check_equal(gate, "fp8 kv store (engine paged, trainer transient): same bits", outputs)
    expected = tuple(ref_quant.to_output(ref_quant.round_to_grid(t.float(), grid, ref_quant.E4M3_SIGN)[1], dtype)
                     for t in (k, v))
    _check_equal(gate, "fp8 kv store: equals the float64 reference's rounding (saturating)", outputs, expected)
    gate.verdict()


def test_silu_mul_rounding(gate):
    config = _config(gate)
    _require_region(gate, config, "mlp_act", "its MLPs are relu^2, not SiLU(gate)*up")
    seed = fresh_seed()
    gate.inputs = {"seed": seed, "gate_up": [NUM_ROWS, config.intermediate_size]}
    gate_in, up = (4 * torch.randn(2, NUM_ROWS, config.intermediate_size, generator=generator(seed))).to(
        config.torch_dtype)
    outputs = per_case(load_contract(gate.contract), "mlp_act", lambda op, g, u: op(g, u), gate_in, up)
    _check_equal(gate, "mlp_act SiLU(gate)*up: every case gives the same bits", outputs)
    gate.verdict()
