"""`harness diff`: the figures as a table or JSON, exit codes, and clear errors on bad input."""
import json

from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_OK, main

SMALL = ["--num-sequences", "6", "--new-tokens", "8"]
KEYS = {"max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing", "num_tokens"}


def _json(capsys, argv):
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_diff_json_consistent_is_exactly_zero(capsys, fresh_seed):
    code, result = _json(capsys, ["diff", "--model", "qwen3", "--json", "--strict", "--seed",
                                  str(fresh_seed), *SMALL])
    assert code == EXIT_OK
    assert KEYS <= set(result) and result["num_tokens"] == 48
    assert all(result[k] == 0 for k in KEYS - {"num_tokens"}), result


def test_diff_fast_reports_differences_and_strict_exit(capsys, fresh_seed):
    code, result = _json(capsys, ["diff", "--model", "qwen3", "--contract", "fast", "--json",
                                  "--strict", "--seed", str(fresh_seed), *SMALL])
    assert code == EXIT_DIFFERENT and result["frac_tokens_differing"] > 0, result


def test_diff_table(capsys):
    assert main(["diff", "--model", "qwen3", *SMALL]) == EXIT_OK
    out = capsys.readouterr().out
    assert "k3_kl" in out and "verdict: bitwise identical" in out


def test_bad_input_is_a_clear_error(capsys):
    assert main(["diff", "--model", "llama"]) == EXIT_BAD_INPUT
    assert "unknown model 'llama'" in capsys.readouterr().err
    assert main(["diff", "--model", "qwen3", "--contract", "turbo"]) == EXIT_BAD_INPUT
    assert "unknown contract 'turbo'" in capsys.readouterr().err
    assert main(["diff", "--model", "qwen3", "--size", "huge"]) == EXIT_BAD_INPUT
    assert "sizes" in capsys.readouterr().err


def test_diff_nemotron_consistent_is_exactly_zero(capsys, fresh_seed):
    code, result = _json(capsys, ["diff", "--model", "nemotron", "--json", "--strict", "--seed",
                                  str(fresh_seed), *SMALL])
    assert code == EXIT_OK and result["model"] == "nemotron" and result["frac_tokens_differing"] == 0, result
