"""`harness diff`: the engine generates under continuous batching, the trainer scores the
same tokens, and the per-token mismatch figures are reported (gates/mismatch.py)."""
import json

from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, rollout, score, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

FIGURES = ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing", "num_tokens")


def run_diff(model: str, size: str, contract_name: str, workload: Workload,
             shape: EngineShape = EngineShape(), micro_batch_size: int = 8) -> dict:
    config = load_model_config(config_name(model, size))
    contract = load_contract(contract_name)
    weights = seeded_weights(config)
    completions, _ = rollout(config, contract, weights, workload, shape)
    trainer_logprobs = score(config, contract, weights, completions, micro_batch_size=micro_batch_size)
    stats = mismatch_stats([c.logprob_tensor for c in completions], trainer_logprobs)
    return {"model": model, "size": size, "contract": contract.name, "seed": workload.seed, **stats}


def format_table(result: dict) -> str:
    lines = [f"rollout vs trainer: model {result['model']} ({result['size']}), "
             f"contract {result['contract']}, seed {result['seed']}",
             f"{'figure':<24}{'value':>16}"]
    for name in FIGURES:
        value = result[name]
        text = str(value) if isinstance(value, int) else f"{value:.6g}"
        lines.append(f"{name:<24}{text:>16}")
    verdict = "bitwise identical" if result["frac_tokens_differing"] == 0 else "DIFFERENT"
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


def print_result(result: dict, as_json: bool) -> None:
    print(json.dumps(result, sort_keys=True) if as_json else format_table(result))
