"""Gates C04-C09 run through `harness gates`: under the consistent contract C04, C08 and C09
pass on both model cuts and C05 is n/a with its reason (C06 has tests/gates/test_gate_c06.py); the
fast contract fails C04 (Top-K ties, batch-seeded sampler) and C09 (engine != trainer);
planted faults fail their own conditions: C04 the tie-break, the combine order and a
rounding done twice in decode, C08 the wrong SiLU gradient (its quantized-weight plants:
tests/gates/test_gate_c08_quantized.py), C09 a resume that loses the RNG
state. Also: the tie check fails as vacuous on inputs without ties, and C05's compile scan
finds torch.compile.
"""
import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from gates import test_c08_gradients as c08
from gates import test_c09_rl_steps as c09
from gates.conftest import GateRecord
from gates.hazards import VacuousGate
from gates.inputs import fresh_seed
from gates.test_c04_discrete import check_quantization_covered, check_topk
from gates.test_c05_graph import bit_differences, compile_uses
from harness.cli import EXIT_DIFFERENT, EXIT_OK, main
from kernels.contract.contract import CONTRACT_DIR
from kernels.contract.regions import CASES
from tests.candidate_trees import judge_workers_on, tree_with

TIE_RULE = "topk ids and slot order follow the unique key (lowest id wins ties)"
COMBINE_ORDER = "moe_combine sums the slots in slot order (fp32, one rounding)"
SAMPLER_BATCH = "sampler: each request draws the same tokens alone and in any batch and case"
TOP_K_TIES = "sampler: top-k keeps the lowest ids of a tie across the k-th place (unique key)"
SILU_CASES = "mlp_act SiLU(gate)*up: every case gives the same bits"
LOSE_RNG_STATE_ON_RESUME = """
from gates import faults as _faults
from kernels.trainer import rl_loop as _rl_loop
_rl_loop.GRPORun.resume = _faults.resume_losing_rng_state
"""
RESUMED_STEP = "the first step after resume equals the uninterrupted step 2 bitwise"
SIZES = {"qwen3": ("cut",), "nemotron": ("cut", "cut-quant"), "deepseek": ("cut", "cut-quant")}  # C04: every size


def _sized(model: str, *names) -> set:
    """C04's condition names on every shipped size of `model`."""
    return {f"[{size}] {name}" for size in SIZES[model] for name in names}
RESUMED_WEIGHTS = "model and fp32 master weights after the resumed step equal the uninterrupted run's"
ENGINE_DIFFS = {"engine == trainer_fwd (scores) log-probs, bitwise, every step",
                "engine == trainer_bwd (the update's forward) log-probs, bitwise, every step"}


def _gates(tmp_path, model, only, contract="consistent"):
    """(exit code, {gate: its JSON}) of one `harness gates` run."""
    out = tmp_path / f"{model}-{only.replace(',', '')}-{Path(str(contract)).stem}"
    code = main(["gates", "--model", model, "--only", only, "--contract", str(contract), "--out", str(out)])
    return code, {path.stem: json.loads(path.read_text()) for path in out.glob("C*.json")}


def _failed(result) -> set:
    return {c["name"] for c in result["conditions"] if c["status"] == "fail"}


def _planted(tmp_path, region, impl) -> str:
    """consistent.yaml with every case of one region bound to a planted fault, as a YAML file."""
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = f"consistent-planted-{region}"
    document["regions"][region] = {case: {"impl": impl} for case in document["regions"][region]}
    path = tmp_path / f"planted-{region}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize("model", ["qwen3", "nemotron"])
def test_consistent_contract_passes(tmp_path, model):
    only = "C4,C5,C8,C9" if model == "qwen3" else "C4,C8,C9"  # C05 does not depend on the model
    code, results = _gates(tmp_path, model, only)
    expected = {"C04": "pass", "C08": "pass", "C09": "pass"}
    if model == "qwen3":
        expected.update({"C05": "n/a"})
    assert {name: r["status"] for name, r in results.items()} == expected
    assert code == EXIT_OK
    statuses = {c["name"]: c["status"] for c in results["C04"]["conditions"]}
    not_applicable = {"qwen3": {"topk", "moe_combine", "weight_quant"}, "nemotron": {"mlp_act"}}[model] | {
        "block_topk", "hash_topk"}  # DeepSeek-V4's selections
    assert {name for name, status in statuses.items() if status == "n/a"} == _sized(model, *not_applicable)
    assert all(statuses[name] == "pass" for name in _sized(model, SAMPLER_BATCH, *([TIE_RULE] * (model != "qwen3"))))
    covered = _sized(model, "the calls covered every quantization the config names") & set(statuses)
    assert covered == ({"[cut-quant] the calls covered every quantization the config names"}
                       if model == "nemotron" else set()) and all(statuses[name] == "pass" for name in covered)
    recomputed = [c for c in results["C08"]["conditions"] if "recomputed in backward" in c["name"]]
    assert len(recomputed) == (2 if model == "nemotron" else 1) and all(c["status"] == "pass" for c in recomputed)
    grads = [c for c in results["C08"]["conditions"] if "] d loss / d " in c["name"]]
    assert len(grads) > 30 and all(c["relative_error"] <= c["tolerance"] == 1e-4 for c in grads)
    sizes = {c["name"].split("]")[0] + "]" for c in grads}
    assert sizes == ({"[cut]", "[cut-quant]"} if model == "nemotron" else {"[cut]"}), sizes
    c09 = results["C09"]
    assert c09["inputs"][0]["num_steps"] == 20 and len(c09["conditions"]) == 10
    crossed = next(c for c in c09["conditions"] if c["name"].startswith("contexts crossed a key block"))
    assert crossed["status"] == "pass" and crossed["coverage"]["key_blocks_crossed"] > 0, crossed
    if model == "qwen3":
        assert results["C05"]["not_applicable"] == ["no CUDA device: CUDA graphs need a GPU"]
        assert results["C05"]["inputs"][0]["torch_compile_uses"] == []


def test_fast_contract_fails_c04_and_c09(tmp_path):
    code, results = _gates(tmp_path, "nemotron", "C4", "fast")
    assert code == EXIT_DIFFERENT and results["C04"]["status"] == "fail"
    assert _sized("nemotron", TIE_RULE, SAMPLER_BATCH) <= _failed(results["C04"])
    code, results = _gates(tmp_path, "qwen3", "C9", "fast")
    assert code == EXIT_DIFFERENT and results["C09"]["status"] == "fail"
    assert ENGINE_DIFFS <= _failed(results["C09"])


@pytest.mark.parametrize("region, impl, condition", [
    ("topk", "topk.planted_highest_id_wins", TIE_RULE),
    ("moe_combine", "moe_combine.planted_reverse_order", COMBINE_ORDER),
    ("sampler", "sampler.planted_keeps_every_tie", TOP_K_TIES),
])
def test_c04_catches_planted_discrete_faults(tmp_path, region, impl, condition):
    code, results = _gates(tmp_path, "nemotron", "C4", _planted(tmp_path, region, impl))
    assert code == EXIT_DIFFERENT
    assert _failed(results["C04"]) == _sized("nemotron", condition)  # both sides agree: only the rule catches it


def test_c08_catches_a_wrong_gradient(tmp_path):
    contract = _planted(tmp_path, "mlp_act", "activation.planted_wrong_gradient")
    code, results = _gates(tmp_path, "qwen3", "C8", contract)
    assert code == EXIT_DIFFERENT and results["C08"]["status"] == "fail"
    failed = _failed(results["C08"])
    assert "[cut] d loss / d layers.0.gate_up_proj: relative error <= 0.0001" in failed
    assert "[cut] loss: relative error <= 0.0001" not in failed  # the forward bits are right


def test_c08_catches_a_recomputed_forward_that_is_another(tmp_path):
    """o_proj's trainer_bwd reduced in an order drawn per call: the recomputed forward of each
    layer is another, so the gradients with recompute differ from those without."""
    from tests.planted_contracts import planted
    binding = {"impl": "linear.planted_atomic_split_k", "constants": {"num_splits": 4}}
    code, results = _gates(tmp_path, "qwen3", "C8", planted(tmp_path, {("o_proj", "trainer_bwd"): binding}))
    recompute = "[cut] every gradient bit equal with each layer's activations recomputed in backward"
    assert code == EXIT_DIFFERENT and recompute in _failed(results["C08"])
    assert next(c for c in results["C08"]["conditions"] if c["name"] == recompute)["num_differing"] > 0


REFERENCE_AGREES = """
from gates import faults as _faults, gradient_reference as _reference
_reference.ReferenceDispatch.mlp_act = lambda self, layer, gate, up: _faults.silu_mul_wrong_gradient(gate, up)
"""


def test_c08_reference_is_not_the_candidates_to_rewire(tmp_path, monkeypatch):
    """A candidate with a wrong SiLU gradient whose kernels, once imported, make the reference
    compute the same wrong gradient: the reference runs on the base commit's kernels in a
    worker of its own, where the candidate's code never runs, so the gradient still fails."""
    judge_workers_on(tree_with(tmp_path / "candidate", REFERENCE_AGREES), tmp_path, monkeypatch)
    record = GateRecord("C08", "qwen3", _planted(tmp_path, "mlp_act", "activation.planted_wrong_gradient"))
    with pytest.raises(AssertionError, match="condition"):
        c08.test_gradients_match_float64_reference(record)
    failed = {c["name"] for c in record.conditions if c["status"] == "fail"}
    assert "[cut] d loss / d layers.0.gate_up_proj: relative error <= 0.0001" in failed
    assert "[cut] loss: relative error <= 0.0001" not in failed


def test_tie_check_without_ties_is_vacuous():
    record = GateRecord("C04", "nemotron", "consistent")
    scores = torch.rand(64, 16, generator=torch.Generator().manual_seed(0))  # continuous: no exact ties
    with pytest.raises(VacuousGate, match="exact ties across the k-th place"):
        next(check_topk(record, scores, torch.zeros(16), 4, 2.5))  # the check stops before it asks a worker
    assert [c["status"] for c in record.conditions] == ["fail"]  # recorded before it raised


def test_compile_scan_finds_torch_compile(tmp_path):
    clean, compiled = tmp_path / "clean.py", tmp_path / "compiled.py"
    clean.write_text('"""Not torch.compile, only its name in a docstring."""\nimport re\nre.compile("x")\n')
    compiled.write_text("import torch\nfrom torch import compile\nimport torch._dynamo\n\n"
                        "def f(x):\n    return x\n\n\ng = torch.compile(f)\n")
    assert compile_uses([clean]) == []
    assert compile_uses([compiled]) == [f"{compiled}:{line}" for line in (2, 3, 9)]


def test_c05_compares_every_token_and_log_prob_bit():
    """C05's comparison of the eager and graphed workers' answers, on fresh random bits: equal
    runs agree; one flipped low bit, one other token and a missing request are each named."""
    generator = torch.Generator().manual_seed(fresh_seed())
    run = [[torch.randint(0, 1000, (9,), generator=generator).tolist(),
            torch.randn(9, generator=generator).view(torch.int32).tolist()] for _ in range(4)]
    same = bit_differences(run, [[list(t), list(b)] for t, b in run])
    assert same["token_mismatch_requests"] == [] and same["num_logprob_differences"] == 0 and same["tokens"] == 36
    flipped = [[list(t), list(b)] for t, b in run]
    flipped[2][1][5] ^= 1
    flipped[3][0][0] += 1
    found = bit_differences(run, flipped)
    assert found["token_mismatch_requests"] == [3] and found["logprob_differences"] == ["request 2, token 5"]
    assert bit_differences(run, run[:3])["token_mismatch_requests"] == ["4 vs 3 requests"]


def test_c04_catches_a_rounding_done_twice(tmp_path):
    """Decode computes SiLU(gate)*up with a bf16 rounding between the two (activation.fast)."""
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = "consistent-planted-two-roundings"
    document["regions"]["mlp_act"]["engine_decode"] = {"impl": "activation.fast"}
    path = tmp_path / "two-roundings.yaml"
    path.write_text(yaml.safe_dump(document))
    code, results = _gates(tmp_path, "qwen3", "C4", path)
    assert code == EXIT_DIFFERENT
    failed = {c["name"]: c for c in results["C04"]["conditions"] if c["status"] == "fail"}
    assert set(failed) == _sized("qwen3", SILU_CASES)
    differing = {case for case, text in failed[f"[cut] {SILU_CASES}"].items() if case in CASES and text != "identical"}
    assert differing == {"engine_decode"}


def test_c04_runs_each_case_in_its_runtime_s_autograd_mode(tmp_path):
    """Two roundings only in inference mode: the engine cases differ, the trainer's do not."""
    code, results = _gates(tmp_path, "qwen3", "C4", _planted(tmp_path, "mlp_act",
                                                             "activation.planted_inference_two_roundings"))
    assert code == EXIT_DIFFERENT
    failed = {c["name"]: c for c in results["C04"]["conditions"] if c["status"] == "fail"}
    assert set(failed) == _sized("qwen3", SILU_CASES)
    differing = {case for case, text in failed[f"[cut] {SILU_CASES}"].items() if case in CASES and text != "identical"}
    assert differing == {"engine_prefill", "engine_decode", "engine_graph"}


def test_c04_catches_a_scale_of_the_wrong_granularity(tmp_path):
    """act_quant with one per-tensor scale (the fast variant) bound in the consistent contract:
    the crafted blocks' extremes differ, so both its conditions fail (they passed when every
    block held the same extreme)."""
    code, results = _gates(tmp_path, "nemotron", "C4", _planted(tmp_path, "act_quant", "act_quant.fast"))
    assert code == EXIT_DIFFERENT
    assert _failed(results["C04"]) == _sized("nemotron", "act_quant fp8: every case gives the same bits",
                                             "act_quant fp8: equals the float64 reference's rounding")


def test_c09_catches_a_resume_that_loses_rng_state(tmp_path, monkeypatch):
    """The candidate's GRPORun.resume restarts the random stream (gates/faults.py); C09's
    workers run that tree, and the resumed step and weights differ."""
    monkeypatch.setattr(c09, "NUM_STEPS", 4)  # the fault shows at the first resumed step
    judge_workers_on(tree_with(tmp_path / "candidate", LOSE_RNG_STATE_ON_RESUME), tmp_path, monkeypatch)
    record = GateRecord("C09", "qwen3", "consistent")
    with pytest.raises(AssertionError, match="condition"):
        c09.test_grpo_steps_and_resume(record, tmp_path)
    failed = {c["name"]: c for c in record.conditions if c["status"] == "fail"}
    loaded = "the judging process loaded no module of the code under test"  # this test process has
    # engine == trainer still holds; the weights after the resumed step may still agree when
    # both steps' groups tie on reward (zero advantages: the update is the optimizer's moments)
    assert {RESUMED_STEP, loaded} <= set(failed) <= {RESUMED_STEP, RESUMED_WEIGHTS, loaded}, set(failed)
    assert failed[RESUMED_STEP]["engine_logprobs"] > 0


@pytest.mark.parametrize("key_block", [8, 32, 64])
def test_c09s_prompts_run_past_the_key_block(key_block, fresh_seed):
    """C09 sizes its prompts from the contract's key block, so its crossing condition holds for
    any contract (the 4-12 token prompts it had stopped short of a 32-key block: the control)."""
    from gates.boundaries import coverage
    from gates.rl_runs import settings
    from kernels.trainer.rl_loop import prompt_tokens
    lengths = lambda s: [len(prompt_tokens(s.seed, i, 500, s.min_prompt_len, s.max_prompt_len))  # noqa: E731
                         for i in range(20)]
    crossing = lengths(settings(fresh_seed, key_block))
    assert min(crossing) > key_block and coverage(crossing, key_block, key_block)["key_blocks_crossed"] > 0
    before = lengths(dataclasses.replace(settings(fresh_seed, key_block), min_prompt_len=4, max_prompt_len=12))
    assert coverage([length + 8 for length in before], 32, 32)["key_blocks_crossed"] == 0


def test_c04_fails_when_a_quantization_the_config_names_did_not_run():
    """The quantized cut names NVFP4 experts, FP8 W8A8 projections and an FP8 KV cache: calls
    that miss one fail the coverage condition; the unquantized cut names none (no condition)."""
    quantized = {"expert_quant": "nvfp4", "mamba_proj_quant": "fp8", "kv_cache_dtype": "fp8"}
    every = [{"kind": "quant", "region": "weight_quant", "fmt": "nvfp4"},
             {"kind": "quant", "region": "weight_quant", "fmt": "fp8"},
             {"kind": "quant", "region": "act_quant", "fmt": "fp8"}, {"kind": "kv_store"}]
    for calls, passed in ((every, "pass"), (every[1:], "fail"), (every[:2] + every[3:], "fail"), (every[:3], "fail")):
        record = GateRecord("C04", "nemotron", "consistent")
        check_quantization_covered(record, quantized, calls)
        assert [c["status"] for c in record.conditions] == [passed], calls
    record = GateRecord("C04", "nemotron", "consistent")
    check_quantization_covered(record, {"expert_quant": "none", "mamba_proj_quant": "none", "kv_cache_dtype": "auto"},
                               [])
    assert record.conditions == []
