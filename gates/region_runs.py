"""C01's runs, as its workers compute them (gates/candidate.py): every case's forwards on fresh
random tokens, every region call's outputs reduced to (shape, dtype, sha256, NaN count), in call
order. Per case (the longest sequence past the contract's key block): engine_prefill, a prefill of
three sequences then a chunked prefill; engine_decode and engine_graph, a prefill then three
decode steps (on the CPU engine_graph's binding runs eagerly; capture is C05's); trainer_fwd and
trainer_bwd, one packed forward (gradients are C08's). Under torch.use_deterministic_algorithms
torch.empty fills with NaN (integers: their max), so a skipped write shows as poison.
"""
import random

import torch

from gates import device
from gates.compare import tensor_digest
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.state import TransientCache
from kernels.ops.sampler import SamplingParams

CASES = ("engine_prefill", "engine_decode", "engine_graph", "trainer_fwd", "trainer_bwd")
NUM_DECODE_STEPS = 3
# Regions only one block type calls (hybrid families): a cut without that block never runs them.
BLOCK_REGIONS = {"mamba": ("ssm_in_proj", "ssm_conv", "ssm_scan", "ssm_norm", "ssm_out_proj", "act_quant"),
                 "attention": ("qkv_proj", "attention", "o_proj"),
                 "moe": ("router", "topk", "expert_gemm", "shared_expert", "moe_combine"),
                 "mlp": ("mlp",)}


def summary(tensor: torch.Tensor) -> dict:
    """What the judge compares of one output: its shape, dtype, bytes' digest and NaN count."""
    data = tensor.detach().cpu()
    return {"shape": list(data.shape), "dtype": str(data.dtype), "sha256": tensor_digest(data),
            "nan": int(data.isnan().sum()) if data.is_floating_point() else 0}


class Capture:
    """Observer: every region call's key and its tensor outputs' summaries, in call order."""

    def __init__(self):
        self.calls = []

    def __call__(self, call):
        items = call.output if isinstance(call.output, tuple) else (call.output,)
        self.calls.append({"key": [call.region, call.case, call.layer],
                           "outputs": [summary(t) for t in items if isinstance(t, torch.Tensor)]})


def plan(case: str, seed: int, vocab_size: int, key_block: int) -> list:
    """The forwards of one run: [(batch case, segment case, [(seq_id, start, tokens)])]."""
    rng = random.Random(seed)
    lengths = [1, rng.randint(9, 20), rng.randint(key_block + 1, key_block + 16)]
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


def run(model, contract, forwards, sampling_seed: int) -> list:
    """Every region call's output summaries over the forwards, on a fresh cache."""
    capture = Capture()
    dispatch = RegionDispatch(contract, [capture])
    cache = TransientCache.for_case(model.config, forwards[0][0])
    for batch_case, segment_case, pieces in forwards:
        batch = TokenBatch.from_sequences(pieces, batch_case, segment_case, device=device.target())
        hidden = model(batch, dispatch, cache)
        logits = model.logits(hidden, dispatch, batch_case)
        num_rows = batch.tokens.shape[0]
        dispatch("logprob", batch_case, None, logits, batch.tokens, torch.ones(num_rows, device=device.target()))
        params = [SamplingParams(1.0, top_k=50, seed=sampling_seed + s.seq_id)
                  for s in batch.segments for _ in range(s.length)]
        dispatch("sampler", batch_case, None, logits, params, batch.positions.tolist())
    return capture.calls


def expected_regions(config) -> list:
    """The regions a forward of this config calls (all of REGIONS but absent blocks' own)."""
    present = set(getattr(config, "block_types", BLOCK_REGIONS))
    return sorted(set(config.REGIONS) - {r for kind, regions in BLOCK_REGIONS.items()
                                         if kind not in present for r in regions})


def every_case(model, contract, seeds: dict, key_block: int) -> dict:
    """{case: {calls, shapes}} of one run of every case under its seed, allocations poisoned."""
    was_on, was_warn_only = (torch.are_deterministic_algorithms_enabled(),
                             torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True)
    try:
        runs = {}
        for case in CASES:
            forwards = plan(case, seeds[case], model.config.vocab_size, key_block)
            with torch.no_grad():
                runs[case] = {"calls": run(model, contract, forwards, sampling_seed=seeds[case]),
                              "shapes": [[(s, len(t)) for _, s, t in pieces] for _, _, pieces in forwards]}
        return runs
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
