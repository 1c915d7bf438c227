"""`harness locate --target T --checkpoint DIR`: the first divergent module of an outside target.
Where its two sides run one module tree (transformers: generate with the KV cache vs a full
forward), a few random greedy probes are decoded and re-run whole, every module's rows compared
by position (gates/targets/module_rows.py): the earliest position, then the first module in
execution order, whose bits differ, with the guide for that kind of module. Where they do not
(vLLM's engine against transformers' forward), locate is n/a and says why.
"""
import json
import random
import re
from pathlib import Path

from gates.target import missing, target_class

PROBES, NEW_TOKENS = 4, 8
WHY_NOT = {"vllm": "vLLM's engine runs its own module tree (fused qkv_proj and gate_up_proj, the residual "
                   "carried beside the norm), which has no row-for-row counterpart in the trainer side's "
                   "transformers modules; C02, C03 and C07 say which property it lacks"}
WHY_NOT["vllm-batch-invariant"] = WHY_NOT["vllm"]
GUIDES = ((r"(^|\.)(q|k|v|o|gate|up|down|qkv|gate_up)_proj$|lm_head$", "guides/gemm-split-k.md"),
          (r"(^|\.)self_attn$", "guides/attention-split-kv.md"),
          (r"norm$|rotary_emb$", "guides/norm-logprob-reductions.md"))
"""(module name pattern, the guide for a first divergence there), first match wins."""


def guide_for(module: str) -> str | None:
    return next((guide for pattern, guide in GUIDES if re.search(pattern, module)), None)


def locate_outside(target_name: str, checkpoint, out_dir: Path, *, seed: int = 0) -> dict:
    """locate.json for an outside target: status divergent (module, position, phase, element,
    both values, guide), clean (no module row differed) or n/a (why)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"target": target_name, "checkpoint": str(checkpoint), "seed": seed, "probes": PROBES,
              "new_tokens": NEW_TOKENS}
    reason = missing(target_name, ["module_rows"])
    if reason:
        result.update(status="n/a", reason=f"{reason}: {WHY_NOT.get(target_name, 'it offers no module hooks')}")
    else:
        target = target_class(target_name)(checkpoint)
        rng = random.Random(seed)
        prompts = [tuple(rng.randrange(1, target.vocab_size) for _ in range(rng.randint(4, 40))) for _ in range(PROBES)]
        found = [target.first_divergent_module(prompt, NEW_TOKENS) for prompt in prompts]
        result["rows_compared"] = sum(f["rows_compared"] for f in found)
        first = next(((index, f) for index, f in enumerate(found) if f["divergence"]), None)
        if first is None:
            result["status"] = "clean"
        else:
            index, probe = first
            divergence = probe["divergence"]
            phase = "prefill" if divergence["position"] < len(prompts[index]) else "decode"
            result.update(status="divergent", probe=index, prompt_length=len(prompts[index]), phase=phase,
                          guide=guide_for(divergence["module"]), **divergence)
    (out_dir / "locate.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    return result


def format_outside(result: dict) -> str:
    if result["status"] == "n/a":
        return f"locate: n/a on target {result['target']}: {result['reason']}"
    if result["status"] == "clean":
        return f"locate: clean on target {result['target']} ({result['rows_compared']} module rows compared)"
    return (f"first divergent module on target {result['target']}: {result['module']} at position "
            f"{result['position']} ({result['phase']}; probe {result['probe']}, prompt of {result['prompt_length']}), "
            f"element {result['element']}: {result['engine_value']!r} (generate) vs {result['trainer_value']!r} "
            f"(forward); read {result['guide'] or 'guides/README.md'}")
