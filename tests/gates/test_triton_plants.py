"""Faults planted in the consistent CUDA kernels, each through the gate meant for its class
(issue 21): a Triton kernel's split or block constant that follows the call (gates/
faults_cuda.py: split-K, the norm's lanes, the vocabulary sum's block, each below 16 rows;
and shipped variants bound to one case: the attention walk's key block chosen from the
step's longest context, flash-decoding's split count, the scan chunked from the call's first
row). locate, on CUDA, names each plant's region. On a machine without CUDA the gate and
locate runs are skipped with the reason (`n/a`): the device runs this file
(benchmarks/gpu_gates.sh). What runs everywhere: every plant refuses a
CPU tensor with its reason, and C05's workload reaches past any key block and SSM chunk."""
import json

import pytest
import torch

from gates.boundaries import coverage
from harness.cli import EXIT_DIFFERENT, main
from kernels.contract.regions import REGION_FAMILY
from tests.planted_contracts import planted

ENGINE_CASES = ("engine_prefill", "engine_decode", "engine_graph")
LINEARS = sorted(region for region, family in REGION_FAMILY.items() if family == "linear")
BLOCK_BY_CONTEXT = {"impl": "attention.planted_graph_baked_block_kv", "constants": {"block_kv": 32, "row_multiple": 8}}
SPLIT_KV = {"impl": "attention.fast_split_kv", "constants": {"tokens_per_split": 32, "max_splits": 8}}
# name: (regions, cases, binding, gate, models)
PLANTS = {
    "GEMM split-K below 16 rows": (LINEARS, ENGINE_CASES, {"impl": "linear.planted_triton_split_k_small_m",
                                                           "constants": {"row_multiple": 8}},
                                   "C2", ("qwen3", "nemotron")),
    "RMSNorm on half the lanes below 16 rows": (("norm",), ENGINE_CASES, {"impl": "norm.planted_triton_lanes_by_rows"},
                                                "C2", ("qwen3", "nemotron")),
    "vocabulary sum at a quarter block below 16 rows": (("logprob",), ENGINE_CASES,
                                                        {"impl": "logprob.planted_triton_block_by_rows"}, "C2",
                                                        ("qwen3", "nemotron")),
    "decode walk's key block from the longest context": (("attention",), ("engine_decode",), BLOCK_BY_CONTEXT, "C3",
                                                         ("qwen3", "nemotron")),
    "decode split count from the context": (("attention",), ("engine_decode",), SPLIT_KV, "C3", ("qwen3", "nemotron")),
    "scan chunked from the call's first row": (("ssm_scan",), ("engine_prefill",), {"impl": "ssm_scan.fast_chunked"},
                                               "C3", ("nemotron",)),
}
ROUNDED_AWAY = ("RMSNorm on half the lanes below 16 rows",)  # moves ~1e-6 of bf16 outputs (gpu_plant_effects.py)
RUNS = [(name, model) for name, plant in PLANTS.items() for model in plant[4]]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="n/a: the planted constants are the Triton kernels', which run on CUDA only "
                                       "(benchmarks/gpu_gates.sh runs this file on the device)")


@needs_cuda
@pytest.mark.parametrize("name, model", RUNS)
def test_a_planted_kernel_constant_fails_its_gate_on_cuda(tmp_path, name, model):
    regions, cases, binding, gate, _ = PLANTS[name]
    out = tmp_path / "gates"
    code = main(["gates", "--model", model, "--device", "cuda", "--only", gate, "--contract",
                 planted(tmp_path, {(r, c): binding for r in regions for c in cases}, "consistent-planted-cuda"),
                 "--out", str(out)])
    (result,) = [json.loads(path.read_text()) for path in out.glob("C*.json")]
    failed = [c["name"] for c in result["conditions"] if c["status"] == "fail"]
    print(name, model, gate, "failed:", failed)
    assert code == EXIT_DIFFERENT and result["status"] == "fail" and failed, result["status"]
    assert all("judge" not in n and "module" not in n for n in failed), failed  # its bits, not its apparatus


@needs_cuda
@pytest.mark.parametrize("name, model", RUNS)
def test_locate_names_a_planted_kernel_constants_region_on_cuda(tmp_path, name, model):
    """locate on CUDA: the engine with the plant, the trainer consistent. Where the fault moves
    a log-prob, the first divergent door is its region; where it moves none on locate's and
    diff's workloads (the norm's lanes: an element in 10^6, rounded away), `clean` with 0
    differing log-probs, never `inconclusive` and never another region."""
    from harness.stages.locate import locate
    regions, cases, binding, _, _ = PLANTS[name]
    contract = planted(tmp_path, {(r, c): binding for r in regions for c in cases}, "consistent-planted-cuda")
    result = locate(model, contract, tmp_path / "locate", device_name="cuda")
    print(name, model, "locate:", result["status"], result["region"], result["logprob_figures"])
    if result["status"] == "divergent":
        assert result["region"] in regions, result["region"]
    else:
        assert result["status"] == "clean" and result["logprob_figures"]["frac_tokens_differing"] == 0, result
        assert name in ROUNDED_AWAY, f"{name}: no divergence found on {model}"


@pytest.mark.parametrize("plant", ["linear_triton_split_k_small_m", "norm_triton_lanes_by_rows",
                                   "logprob_triton_block_by_rows"])
def test_a_cuda_plant_refuses_the_cpu_with_its_reason(plant, fresh_seed):
    from gates import faults_cuda
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = torch.randn(3, 8, generator=generator), torch.randn(8, 8, generator=generator)
    arguments = {"linear_triton_split_k_small_m": ((x, w), {"row_multiple": 8}),
                 "norm_triton_lanes_by_rows": ((x, w[0]), {"eps": 1e-6}),
                 "logprob_triton_block_by_rows": ((x, torch.zeros(3, dtype=torch.long), torch.ones(3)), {})}[plant]
    with pytest.raises(NotImplementedError, match="runs on CUDA only"):
        getattr(faults_cuda, plant)(*arguments[0], **arguments[1])


@pytest.mark.parametrize("key_block, ssm_chunk", [(8, None), (32, 16), (64, None), (100, 128)])
def test_c05s_workload_reaches_past_the_key_block_and_the_chunk(key_block, ssm_chunk, fresh_seed):
    """C05's prompts are sized from the boundaries its worker reports; the old fixed workload
    (prompts of 4-40 tokens, 24 new) is the negative control: it never reaches a 100-key block."""
    from gates.graph_runs import WORKLOAD, workload_for
    from gates.workload import Workload, make_requests

    def contexts(workload):
        return [len(r.prompt) + r.max_new_tokens for r in make_requests(Workload(seed=fresh_seed, **workload), 500)]
    sized = contexts(workload_for({"key_block": key_block, "ssm_chunk": ssm_chunk}))
    crossed = coverage(sized, key_block, ssm_chunk or key_block)
    assert crossed["key_blocks_crossed"] > 0 and crossed["ssm_chunks_crossed"] > 0
    assert coverage(contexts(WORKLOAD), 100, 100)["key_blocks_crossed"] == 0


def test_c05s_workload_crosses_its_boundaries_whatever_the_seed():
    """One prompt takes the longest length: the random lengths alone left a 128-token chunk
    uncrossed for 3% of seeds (13 prompts of 4-136 tokens)."""
    from gates.graph_runs import workload_for
    from gates.workload import Workload, make_requests
    for seed in range(200):
        requests = make_requests(Workload(seed=seed, **workload_for({"key_block": 100, "ssm_chunk": 128})), 500)
        assert coverage([len(r.prompt) + r.max_new_tokens for r in requests], 100, 128)["ssm_chunks_crossed"] > 0
