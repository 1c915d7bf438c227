"""Gate C01: run-to-run determinism.

Passes when, for every case (engine_prefill, engine_decode, engine_graph, trainer_fwd,
trainer_bwd) of the model's cut, two runs of the same forwards on the same fresh random
tokens give bit-identical outputs at every region call (captured through a RegionDispatch
observer, lm_head, logprob and sampler included), every region of the model ran in that case,
and no output holds the NaN poison. Negative control: a contract mapping o_proj to
linear.planted_atomic_split_k (gates/faults.py) fails it; the fast contract passes
it on CPU, since its CPU kernels are deterministic too.

What a run is, per case: engine_prefill, one prefill of three sequences then a chunked
prefill (segments starting past 0); engine_decode and engine_graph, a prefill then three
steps decoding all three sequences (on CPU there is no graph capture, so engine_graph is the
contract's graph binding run eagerly on the decode shapes; capture itself is C05's);
trainer_fwd and trainer_bwd, one packed forward (forward bits only; gradients are C08's).
Poison: the ops allocate their outputs, none writes into a caller's buffer, so the poison
goes where a skipped write would hide, into every uninitialised allocation: the runs are
under torch.use_deterministic_algorithms, which fills torch.empty and new_empty with NaN
(integers: their max), and a NaN in any output fails the gate.
"""
import random

import pytest
import torch

from gates import device
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.subject import subject_config, subject_label, subject_model
from kernels.contract import load_contract
from kernels.models.batch import TokenBatch
from kernels.models.dispatch import RegionDispatch
from kernels.models.state import TransientCache
from kernels.ops.sampler import SamplingParams

CASES = ("engine_prefill", "engine_decode", "engine_graph", "trainer_fwd", "trainer_bwd")
NUM_DECODE_STEPS = 3
# Regions only one block type calls (hybrid families): a cut without that block never runs them.
BLOCK_REGIONS = {"mamba": ("ssm_in_proj", "ssm_conv", "ssm_scan", "ssm_norm", "ssm_out_proj", "act_quant"),
                 "attention": ("qkv_proj", "attention", "o_proj"),
                 "moe": ("router", "topk", "expert_gemm", "shared_expert", "moe_combine"),
                 "mlp": ("mlp",)}


class Capture:
    """Observer: a clone of every tensor each region call returned, in call order."""

    def __init__(self):
        self.calls = []

    def __call__(self, call):
        items = call.output if isinstance(call.output, tuple) else (call.output,)
        tensors = [t.detach().clone() for t in items if isinstance(t, torch.Tensor)]
        self.calls.append(((call.region, call.case, call.layer), tensors))


def _plan(case: str, seed: int, vocab_size: int) -> list:
    """The forwards of one run: [(batch case, segment case, [(seq_id, start, tokens)])]."""
    rng = random.Random(seed)
    lengths = [1, rng.randint(9, 20), rng.randint(17, 30)]
    prompts = [[rng.randrange(1, vocab_size) for _ in range(n)] for n in lengths]
    first = [(i, 0, p) for i, p in enumerate(prompts)]
    if case.startswith("trainer"):
        return [(case, case, first)]
    if case == "engine_prefill":
        chunks = [(i, lengths[i], [rng.randrange(1, vocab_size) for _ in range(rng.randint(3, 12))])
                  for i in (1, 2)]
        return [(case, case, first), (case, case, chunks)]
    steps = [(case, case, [(i, lengths[i] + step, [rng.randrange(1, vocab_size)]) for i in range(3)])
             for step in range(NUM_DECODE_STEPS)]
    return [("engine_prefill", "engine_prefill", first)] + steps


def _run(model, contract, plan, sampling_seed: int) -> list:
    """Every region call's outputs over the plan, on a fresh cache."""
    capture = Capture()
    dispatch = RegionDispatch(contract, [capture])
    cache = TransientCache.for_case(model.config, plan[0][0])
    for batch_case, segment_case, pieces in plan:
        batch = TokenBatch.from_sequences(pieces, batch_case, segment_case, device=device.target())
        hidden = model(batch, dispatch, cache)
        logits = model.logits(hidden, dispatch, batch_case)
        num_rows = batch.tokens.shape[0]
        dispatch("logprob", batch_case, None, logits, batch.tokens, torch.ones(num_rows, device=device.target()))
        params = [SamplingParams(1.0, top_k=50, seed=sampling_seed + s.seq_id)
                  for s in batch.segments for _ in range(s.length)]
        dispatch("sampler", batch_case, None, logits, params, batch.positions.tolist())
    return capture.calls


def expected_regions(config) -> set:
    """The regions a forward of this config calls (all of REGIONS but absent blocks' own)."""
    present = set(getattr(config, "block_types", BLOCK_REGIONS))
    return set(config.REGIONS) - {r for kind, regions in BLOCK_REGIONS.items()
                                  if kind not in present for r in regions}


def _first_difference(first_run, second_run):
    """(call index, key, BitDiff) of the first differing output, or None."""
    for index, ((key, left), (other_key, right)) in enumerate(zip(first_run, second_run)):
        if key != other_key or len(left) != len(right):
            return index, key, f"call sequence differs: {key} vs {other_key}"
        for a, b in zip(left, right):
            if a.shape != b.shape or a.dtype != b.dtype:
                return index, key, f"shape/dtype differs: {tuple(a.shape)} vs {tuple(b.shape)}"
            difference = first_bit_difference(a, b)
            if difference is not None:
                return index, key, difference
    if len(first_run) != len(second_run):
        return min(len(first_run), len(second_run)), None, "the runs made different numbers of calls"
    return None


def _difference_figures(found) -> dict:
    if found is None:
        return {}
    index, key, difference = found
    figures = {"call_index": index, "detail": str(difference)}
    if key is not None:
        figures.update(region=key[0], region_case=key[1], layer=key[2])
    if hasattr(difference, "ulps"):
        figures.update(element=list(difference.index), first_value=difference.left,
                       second_value=difference.right, first_bits=difference.left_bits,
                       second_bits=difference.right_bits, ulps=difference.ulps)
    return {"first_difference": figures}


@pytest.fixture
def poisoned_allocations():
    """Uninitialised allocations NaN-filled for the test (restored afterwards)."""
    was_on, was_warn_only = (torch.are_deterministic_algorithms_enabled(),
                             torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)


def test_repeated_runs_give_identical_bits(gate, poisoned_allocations):
    config = subject_config(gate)
    contract = load_contract(gate.contract)
    model_seed = fresh_seed()
    model = subject_model(gate, config, model_seed % 1000).requires_grad_(False).to(device.target())
    gate.inputs = {"config": subject_label(gate), "model_seed": model_seed % 1000,
                   "num_decode_steps": NUM_DECODE_STEPS, "seeds": {}, "shapes": {}}
    total = 0
    for case in CASES:
        seed = fresh_seed()
        plan = _plan(case, seed, config.vocab_size)
        gate.inputs["seeds"][case] = seed
        gate.inputs["shapes"][case] = [[(s, len(t)) for _, s, t in pieces] for _, _, pieces in plan]
        with torch.no_grad():
            runs = [_run(model, contract, plan, sampling_seed=seed) for _ in range(2)]
        num_outputs = sum(len(tensors) for _, tensors in runs[0])
        total += num_outputs
        found = _first_difference(*runs)
        gate.check(f"{case}: every region output repeats bit for bit", found is None,
                   num_region_calls=len(runs[0]), num_outputs_compared=num_outputs,
                   **_difference_figures(found))
        ran = {region for (region, region_case, _), _ in runs[0] if region_case == case}
        missing = sorted(expected_regions(config) - ran)
        gate.check(f"{case}: every region of the model ran", not missing, missing=missing,
                   num_regions=len(ran))
        poisoned = sum(int(t.isnan().sum()) for run in runs for _, tensors in run
                       for t in tensors if t.is_floating_point())
        gate.check(f"{case}: no output holds the NaN poison", poisoned == 0, num_nan=poisoned)
    gate.inputs["num_outputs_compared"] = total
    gate.verdict()
