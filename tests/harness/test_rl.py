"""`harness rl` (harness/stages/rl.py): per-step records for both contracts, the consistent one's
mismatch exactly 0 at every step and the fast one's not; the reward of the task rises on a
fixed seed; a resumed run (a step cut off included, resume points every N steps) gives the
uninterrupted run's records; the reused rollout log-probs give the recomputing mode's updates bit
for bit and are refused under the fast contract; the plots are in a report that renders in
headless Chromium."""
import dataclasses
import json
import subprocess

import pytest

from gates.compare import assert_bitwise_equal, int32_bits
from harness.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, main
from harness.stages.rl import at_scale
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name
from kernels.trainer.chunked_head import FOLD_ROWS
from kernels.trainer.rl_loop import GRPORun, GRPOSettings
from tests.harness.test_report import CHROMIUM, CHROMIUM_FLAGS

SHORT = ["--steps", "4", "--prompts", "2", "--group-size", "4", "--new-tokens", "8"]


def _records(out, contract) -> list:
    return [json.loads(line) for line in (out / contract / "steps.jsonl").read_text().splitlines()]


def _timeless(rows) -> list:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "both"
    assert main(["rl", *SHORT, "--out", str(out)]) == EXIT_OK
    return out


def test_consistent_mismatch_is_exactly_zero_every_step_and_fast_is_not(both):
    consistent, fast = _records(both, "consistent"), _records(both, "fast")
    assert [r["step"] for r in consistent] == [r["step"] for r in fast] == [0, 1, 2, 3]
    for row in consistent:
        assert row["mismatch"]["num_tokens"] == 2 * 4 * 8
        figures = row["mismatch"]
        assert figures["max_abs_dp"] == figures["k3_kl"] == figures["frac_tokens_differing"] == 0
        assert row["behaviour_ratio"] == {"min": 1.0, "max": 1.0, "std": 0.0}
    assert all(row["mismatch"]["max_abs_dp"] > 0 for row in fast)
    assert all(set(row["seconds"]) == {"rollout", "score", "update", "sync"} for row in consistent + fast)


def test_the_report_plots_reward_and_mismatch_and_renders_in_chromium(both, tmp_path):
    report = (both / "report.md").read_text()
    for curve in ("reward", "max_abs_dp", "k3_kl"):
        assert f"plots/rl_{curve}.svg" in report and (both / "plots" / f"rl_{curve}.svg").stat().st_size > 2000
    assert "| consistent | 4 |" in report and "4 of 4 scored" in report
    assert CHROMIUM.exists(), "headless Chromium is needed (apt-get install -y --no-install-recommends chromium)"
    dom = subprocess.run([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          (both / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert all(f'id="plot-{curve}"' in dom.stdout for curve in ("reward", "max_abs_dp", "k3_kl"))
    assert 'id="contract-consistent"' in dom.stdout and 'id="contract-fast"' in dom.stdout


def test_the_task_is_learned_on_a_fixed_seed(tmp_path):
    out = tmp_path / "learn"
    assert main(["rl", "--contract", "consistent", "--steps", "8", "--lr", "1e-2", "--seed", "0",
                 "--out", str(out)]) == EXIT_OK
    rewards = [r["reward"] for r in _records(out, "consistent")]
    print(f"reward per step, consistent, lr 1e-2, seed 0: {rewards}")  # recorded, not assumed
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1


def test_a_resumed_run_gives_the_uninterrupted_run_s_records(tmp_path, monkeypatch):
    whole, resumed, sparse = tmp_path / "whole", tmp_path / "resumed", tmp_path / "sparse"
    common = ["--contract", "consistent", "--prompts", "2", "--group-size", "2", "--new-tokens", "6"]
    assert main(["rl", *common, "--steps", "5", "--out", str(whole)]) == EXIT_OK
    assert main(["rl", *common, "--steps", "2", "--out", str(resumed)]) == EXIT_OK
    with (resumed / "consistent" / "steps.jsonl").open("a") as out:  # a step recorded, its checkpoint never saved
        out.write(json.dumps(_records(whole, "consistent")[2]) + "\n")
    assert main(["rl", *common, "--steps", "5", "--out", str(resumed)]) == EXIT_OK
    assert _timeless(_records(resumed, "consistent")) == _timeless(_records(whole, "consistent"))
    assert main(["rl", *common, "--lr", "1e-2", "--steps", "5", "--out", str(resumed)]) == EXIT_BAD_INPUT

    # resume points every 2 steps, Ctrl-C in the fourth: three records, the resume point after two
    step, every_2 = GRPORun.step, ["--steps", "5", "--checkpoint-every", "2", "--out", str(sparse)]
    with monkeypatch.context() as patched:
        patched.setattr(GRPORun, "step", lambda run, **kw: (_ for _ in ()).throw(KeyboardInterrupt)
                        if run.step_index == 3 else step(run, **kw))
        assert main(["rl", *common, *every_2]) == EXIT_INTERRUPTED
    state = json.loads((sparse / "consistent" / "checkpoint" / "run_state.json").read_text())
    assert len(_records(sparse, "consistent")) == 3 and state["step"] == 2
    assert main(["rl", *common, *every_2]) == EXIT_OK
    assert _timeless(_records(sparse, "consistent")) == _timeless(_records(whole, "consistent"))
    assert main(["rl", *common, "--steps", "5", "--checkpoint-every", "0", "--out", str(sparse)]) == EXIT_BAD_INPUT


def test_reused_rollout_log_probs_give_the_same_updates_and_are_refused_under_fast(tmp_path, capsys):
    common = ["--contract", "consistent", "--prompts", "2", "--group-size", "2", "--new-tokens", "6", "--steps", "4"]
    assert main(["rl", *common, "--out", str(tmp_path / "recompute")]) == EXIT_OK
    assert main(["rl", *common, "--reuse-rollout-logprobs", "--verify-fraction", "0.5",
                 "--out", str(tmp_path / "reuse")]) == EXIT_OK
    recompute, reuse = _records(tmp_path / "recompute", "consistent"), _records(tmp_path / "reuse", "consistent")
    assert [r["loss"] for r in recompute] == [r["loss"] for r in reuse]
    assert reuse[0]["verified"] is True and any(r["mismatch"] is None for r in reuse)  # forwards saved
    for name in ("model.safetensors", "master.safetensors"):  # the weights after the run, byte for byte
        saved = [(tmp_path / mode / "consistent" / "checkpoint" / name).read_bytes() for mode in ("recompute", "reuse")]
        assert saved[0] == saved[1] and len(saved[0]) > 10_000
    capsys.readouterr()
    assert main(["rl", "--contract", "fast", "--steps", "2", "--reuse-rollout-logprobs",
                 "--out", str(tmp_path / "fast")]) == EXIT_BAD_INPUT
    assert "needs a contract whose C07 passes" in capsys.readouterr().err


def test_bad_options_are_clear_errors(tmp_path, capsys):
    """Each mistake is one line naming the option, before anything is written."""
    for bad, named in ((["--steps", "0"], "--steps"), (["--prompts", "0"], "--prompts"),
                       (["--group-size", "1"], "--group-size"), (["--new-tokens", "0"], "--new-tokens"),
                       (["--device", "tpu"], "tpu"), (["--model", "nope"], "nope")):
        assert main(["rl", *bad, "--out", str(tmp_path / "run")]) == EXIT_BAD_INPUT, bad
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err, (bad, err)
        assert not (tmp_path / "run").exists(), bad


def test_the_consistent_run_gives_the_same_steps_at_the_shape_of_a_gpu_run(fresh_seed):
    """at_scale's engine and trainer memory shape (what --device cuda runs, graphs aside) moves
    no bit under the consistent contract: every sequence at once with its KV reserved, head
    chunks, per-layer recompute. The micro-batch is the gradient's fold unit (kernels/trainer/
    trainer.py), a numerics choice of the run: held equal here."""
    config, contract = load_model_config(config_name("qwen3", "cut")), load_contract("consistent")
    cpu = GRPOSettings(prompts_per_step=2, group_size=4, max_new_tokens=20, lr=3e-3, seed=fresh_seed,
                       micro_batch_size=4)  # two micro-batches of 80 rows
    scaled = at_scale(cpu, graphs=False)
    assert scaled.engine_tokens_per_step > 8 * 24 > cpu.engine_tokens_per_step and scaled.recompute_layers
    scale = dataclasses.replace(scaled, head_chunk_rows=FOLD_ROWS, micro_batch_size=4)  # 2 head chunks each
    runs = [GRPORun(config, contract, settings) for settings in (cpu, scale)]
    for _ in range(2):
        steps = [run.step(old="trainer") for run in runs]
        assert [len(t) for t in steps[0].update_logprobs] == [20] * 8 and 4 * 20 > FOLD_ROWS
        for field in ("engine_logprobs", "trainer_logprobs", "update_logprobs"):
            cpu_bits, scale_bits = ([int32_bits(t) for t in getattr(step, field)] for step in steps)
            assert cpu_bits == scale_bits, field
        assert steps[0].loss == steps[1].loss
    weights = [run.trainer.weights() for run in runs]
    for name, tensor in weights[0].items():
        assert_bitwise_equal(tensor, weights[1][name], name)
