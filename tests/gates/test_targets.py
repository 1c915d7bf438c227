"""Targets (gates/target.py): our kernels through the interface give the figures they always
gave; transformers is judged through the same two calls, its figures measured over every
generated token; a difference planted between a target's sides shows; bad input is a clear error."""
import json

import pytest
import torch

from gates.mismatch import mismatch_stats
from gates.target import missing, target_class
from gates.workload import Workload
from harness.cli import EXIT_BAD_INPUT, EXIT_OK, main
from tests.tiny_checkpoints import save_tiny_qwen3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), tie=False)[0])


def _diff(capsys, *args) -> dict:
    assert main(["diff", *args, "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_transformers_generate_vs_forward_is_measured_on_every_token(capsys, checkpoint, fresh_seed):
    result = _diff(capsys, "--target", "transformers", "--checkpoint", checkpoint, "--num-sequences", "6",
                   "--new-tokens", "10", "--seed", str(fresh_seed))
    assert result["target"] == "transformers" and result["contract"] == "n/a"
    assert result["num_tokens"] == 60
    print(f"transformers, generate vs forward (fp32, CPU): {result}")  # recorded, not assumed
    assert 0.0 <= result["frac_tokens_differing"] <= 1.0 and result["max_abs_dp"] >= 0.0


def test_a_difference_planted_in_the_trainer_side_shows(checkpoint, fresh_seed):
    target = target_class("transformers")(checkpoint)
    samples = target.generate(Workload(num_sequences=3, new_tokens=6, max_prompt_len=20, seed=fresh_seed))
    scored = target.score(samples)
    planted = [t.clone() for t in scored]
    planted[1][2] = torch.nextafter(planted[1][2], torch.tensor(0.0))  # one ulp on one token
    clean, moved = (mismatch_stats([s.logprobs for s in samples], side) for side in (scored, planted))
    assert moved["frac_tokens_differing"] > 0 and moved["max_abs_dp"] > 0
    assert moved != clean


def test_transformers_generate_is_repeatable_and_its_log_probs_are_real(checkpoint, fresh_seed):
    target = target_class("transformers")(checkpoint)
    workload = Workload(num_sequences=4, new_tokens=5, max_prompt_len=16, seed=fresh_seed)
    first, again = target.generate(workload), target.generate(workload)
    assert [s.tokens for s in first] == [s.tokens for s in again]
    assert all(torch.equal(a.logprobs.view(torch.int32), b.logprobs.view(torch.int32)) for a, b in zip(first, again))
    assert all(len(s.tokens) == 5 and bool((s.logprobs < 0).all()) for s in first)


def test_our_target_through_the_interface_is_bitwise_and_the_fast_contract_is_not(capsys, fresh_seed):
    seed = ["--seed", str(fresh_seed), "--num-sequences", "8", "--new-tokens", "12"]
    consistent = _diff(capsys, "--model", "qwen3", "--target", "ours", *seed)
    fast = _diff(capsys, "--model", "qwen3", "--contract", "fast", *seed)
    assert consistent["target"] == "ours" and consistent["frac_tokens_differing"] == 0 and consistent["k3_kl"] == 0
    assert fast["frac_tokens_differing"] > 0 and consistent["num_tokens"] == fast["num_tokens"] == 96


def test_what_a_target_does_not_offer_is_named():
    assert target_class("transformers").offers == frozenset({"module_rows"}) and target_class("ours").offers
    assert missing("ours", ["contract", "region_doors"]) is None
    assert missing("transformers", ["contract", "region_doors"]) == (
        "target transformers does not offer a contract naming each region's implementation (fast / consistent); "
        "nor one door per region, where locate and C02's row replay trace both sides")


def test_bad_target_input_is_a_clear_error(capsys, tmp_path):
    assert main(["diff", "--target", "transformers", "--model", "qwen3"]) == EXIT_BAD_INPUT
    assert "--checkpoint DIR" in capsys.readouterr().err
    assert main(["diff", "--target", "vllm", "--checkpoint", str(tmp_path)]) == EXIT_BAD_INPUT  # needs no vLLM
    assert "no config.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["diff", "--target", "vllm-nope", "--model", "qwen3"])
    with pytest.raises(ValueError, match="one of ours, transformers"):
        target_class("nope")


def test_gates_on_the_transformers_target_measure_c07_and_say_why_the_others_are_n_a(tmp_path, checkpoint):
    out = tmp_path / "gates"
    code = main(["gates", "--target", "transformers", "--checkpoint", checkpoint, "--only", "C4,C7",
                 "--out", str(out)])
    c04, c07 = (json.loads((out / f"{name}.json").read_text()) for name in ("C04", "C07"))
    assert c04["status"] == "n/a" and "target transformers does not offer" in c04["not_applicable"][0]
    figures = {c["name"]: c for c in c07["conditions"]}
    assert figures["max_abs_dp == 0"]["num_tokens"] == 32 * 32 and c07["target"] == "transformers"
    assert figures["mixed prefill/decode steps occurred"]["status"] == "n/a"
    print(f"C07 on transformers (fp32, CPU): {c07['status']}, "
          f"{ {name: c.get('measured') for name, c in figures.items()} }")  # recorded, not assumed
    assert code == (EXIT_OK if c07["status"] == "pass" else 2)


def test_c01_on_the_transformers_target_compares_both_sides_twice(tmp_path, checkpoint):
    out = tmp_path / "gates"
    main(["gates", "--target", "transformers", "--checkpoint", checkpoint, "--only", "C1", "--out", str(out)])
    c01 = json.loads((out / "C01.json").read_text())
    figures = {c["name"]: c for c in c01["conditions"]}
    assert figures["engine side: two runs give the same tokens and log-prob bits"]["num_tokens_compared"] == 256
    assert figures["trainer side: two scorings of the same tokens give the same bits"]["num_tokens_compared"] == 256
    assert figures["every region output repeats bit for bit"]["status"] == "n/a"
    print(f"C01 on transformers (CPU): {c01['status']}")  # recorded, not assumed


def test_c01s_outside_comparison_sees_one_flipped_bit(fresh_seed):
    """The outside-target comparison can fail: one log-prob bit flipped, or another token."""
    from gates.target_runs import first_differing_sequence
    generator = torch.Generator().manual_seed(fresh_seed)
    run = [{"prompt": [1, 2], "tokens": torch.randint(1, 99, (6,), generator=generator).tolist(),
            "bits": torch.randint(-2**31, 2**31 - 1, (6,), generator=generator).tolist()} for _ in range(3)]
    flipped = [dict(c, bits=list(c["bits"])) for c in run]
    flipped[2]["bits"][4] ^= 1
    other = [dict(c, tokens=list(c["tokens"])) for c in run]
    other[0]["tokens"][0] += 1
    assert first_differing_sequence(run, run) is None
    assert first_differing_sequence(run, flipped) == {"sequence": 2, "field": "bits", "position": 4}
    assert first_differing_sequence(run, other) == {"sequence": 0, "field": "tokens", "position": 0}


def test_c02s_outside_comparison_names_the_prompt_that_moved(fresh_seed):
    """One log-prob bit flipped in one prompt of one batch: that prompt, in that batch, only."""
    from gates.target_runs import moved_probes
    generator = torch.Generator().manual_seed(fresh_seed)
    alone = [{"prompt": [i + 1], "tokens": torch.randint(1, 99, (4,), generator=generator).tolist(),
              "bits": torch.randint(-2**31, 2**31 - 1, (4,), generator=generator).tolist()} for i in range(8)]
    orders = {size: torch.randperm(size, generator=generator).tolist() for size in (2, 8)}
    engine = {"alone": alone, **{size: [alone[i] for i in order] for size, order in orders.items()}}
    runs = {"orders": orders, "engine": engine}
    assert moved_probes(runs, "engine") == {2: [], 8: []}
    place = int(torch.randint(0, 8, (1,), generator=generator))
    engine[8] = [dict(c, bits=list(c["bits"])) for c in engine[8]]
    engine[8][place]["bits"][3] ^= 1
    assert moved_probes(runs, "engine") == {2: [], 8: [orders[8][place]]}


def test_c02_on_the_transformers_target_compares_every_prompt_alone_and_in_batches(tmp_path, checkpoint):
    out = tmp_path / "gates"
    main(["gates", "--target", "transformers", "--checkpoint", checkpoint, "--only", "C2", "--out", str(out)])
    c02 = json.loads((out / "C02.json").read_text())
    engine, trainer, regions = c02["conditions"][:3]
    assert engine["num_tokens"] == trainer["num_tokens"] == 16 * 8 and regions["status"] == "n/a"
    assert engine["placements_compared"] == trainer["placements_compared"] == 2 + 8 + 16
    assert {size: sorted(order) for size, order in engine["orders"].items()} == {
        str(size): list(range(size)) for size in (2, 8, 16)}
    print(f"C02 on transformers (CPU): {c02['status']}, prompts moved per batch size: engine {engine['moved']}, "
          f"trainer {trainer['moved']}")  # recorded, not assumed


def _our_cut_targets() -> list:
    """(contract, our target on the seeded qwen3 cut) for the consistent and the fast contract."""
    from gates.targets.ours import OurTarget
    from gates.workload import seeded_weights
    from kernels.contract import load_contract
    from kernels.models.config import load_model_config
    config = load_model_config("qwen3-cut")
    weights = seeded_weights(config)
    return [(name, OurTarget(config, load_contract(name), weights)) for name in ("consistent", "fast")]


def _random_prompts(seed: int, count: int, shortest: int, longest: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(1, 255, (int(n),), generator=generator).tolist())
            for n in torch.randint(shortest, longest, (count,), generator=generator)]


def _prompts_moved(target, prompts) -> int:
    """How many prompts' tokens or log-prob bits change between alone and all together."""
    alone = [target.generate_prompts([prompt], 8)[0] for prompt in prompts]
    among = target.generate_prompts(prompts, 8)
    assert [s.prompt for s in alone] == [s.prompt for s in among] and all(len(s.tokens) == 8 for s in among)
    return sum(a.tokens != b.tokens or not torch.equal(a.logprobs.view(torch.int32), b.logprobs.view(torch.int32))
               for a, b in zip(alone, among))


def test_our_target_keeps_each_prompt_s_bits_among_prompts_and_the_fast_contract_does_not(fresh_seed):
    """generate_prompts through our engine, each of 8 prompts alone and all together: C02's
    outside comparison passes the consistent contract and fails the fast one (its negative
    control, on a stack we know). Greedy decoding makes the fast contract's move depend on the
    draw and the machine's BLAS (here 1-7 of 8 prompts moved per draw; on one CI machine none
    once): its control redraws, up to four draws, and the consistent contract holds on each."""
    (_, consistent), (_, fast) = _our_cut_targets()
    draws = []
    for draw in range(4):
        prompts = _random_prompts(fresh_seed + draw, 8, 4, 40)
        draws.append({"consistent": _prompts_moved(consistent, prompts), "fast": _prompts_moved(fast, prompts)})
        if draws[-1]["fast"]:
            break
    print(f"prompts moved of 8, per draw: {draws}")
    assert all(d["consistent"] == 0 for d in draws) and draws[-1]["fast"] > 0, draws


def test_c03_on_the_transformers_target_compares_decode_with_fresh_prefills(tmp_path, checkpoint):
    out = tmp_path / "gates"
    main(["gates", "--target", "transformers", "--checkpoint", checkpoint, "--only", "C3", "--out", str(out)])
    c03 = json.loads((out / "C03.json").read_text())
    engine, regions = c03["conditions"][:2]
    assert engine["num_tokens_compared"] == 4 * 3 and [len(cuts) for cuts in engine["cuts"]] == [3] * 4
    assert regions["status"] == "n/a"
    print(f"C03 on transformers (CPU): {c03['status']}, cuts {engine['cuts']} moved {engine['differing_cuts']}")


def test_c03s_outside_comparison_names_the_cut_that_moved(fresh_seed):
    """One fresh prefill's log-prob bit flipped: that probe and cut, only; a check that can fail."""
    from gates.target_runs import check_phases
    generator = torch.Generator().manual_seed(fresh_seed)

    def probe():
        decoded = {"tokens": torch.randint(1, 99, (12,), generator=generator).tolist(),
                   "bits": torch.randint(-2**31, 2**31 - 1, (12,), generator=generator).tolist()}
        return {"decoded": decoded, "prefilled": {k: {"tokens": [decoded["tokens"][k]], "bits": [decoded["bits"][k]]}
                                                  for k in (2, 5, 9)}}

    class Gate:
        def check(self, name, passed, **figures):
            self.found = (passed, figures)

    runs, gate = {"probes": [probe(), probe()]}, Gate()
    check_phases(gate, runs)
    assert gate.found[0] and gate.found[1]["num_tokens_compared"] == 6
    runs["probes"][1]["prefilled"][5]["bits"][0] ^= 1
    check_phases(gate, runs)
    assert not gate.found[0] and gate.found[1]["differing_cuts"] == [[1, 5]]


def test_our_target_decodes_what_a_fresh_prefill_gives_and_the_fast_contract_does_not(fresh_seed):
    """C03's outside comparison on a stack we know: consistent decode == fresh prefill, fast !=."""
    prompts = _random_prompts(fresh_seed, 4, 20, 60)
    moved = {}
    for contract, target in _our_cut_targets():
        differing = 0
        for prompt in prompts:
            decoded = target.generate_prompts([prompt], 12)[0]
            for k in (3, 7, 11):
                fresh = target.generate_prompts([prompt + decoded.tokens[:k]], 1)[0]
                differing += (fresh.tokens[0], int(fresh.logprobs.view(torch.int32)[0])) != (
                    decoded.tokens[k], int(decoded.logprobs.view(torch.int32)[k]))
        moved[contract] = differing
    assert moved["consistent"] == 0 and moved["fast"] > 0, moved
