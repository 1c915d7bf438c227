"""`harness gates`: runs gate suites in a subprocess, writes C<NN>.json, prints a table, and
fails when a gate fails; C07 passes under the consistent contract and fails under the fast
one (its negative control); bad input is a clear error."""
import json

import pytest
import torch

from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_OK, main


def test_list_prints_each_gate_and_its_pass_condition(capsys):
    assert main(["gates", "--list"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "C07  Gate C07: small-model end to end." in out and "Passes when" in out


def test_c07_passes_consistent_and_fails_fast(tmp_path, capsys):
    assert main(["gates", "--model", "qwen3", "--only", "C7", "--out", str(tmp_path / "ok")]) == EXIT_OK
    result = json.loads((tmp_path / "ok" / "C07.json").read_text())
    assert result["status"] == "pass" and result["contract"] == "consistent"
    assert len(result["conditions"]) == 7 and result["environment"]["torch"] and result["inputs"][0]["seed"] >= 0
    code = main(["gates", "--model", "qwen3", "--only", "C07", "--contract", "fast", "--out", str(tmp_path / "bad")])
    assert code == EXIT_DIFFERENT
    failed = json.loads((tmp_path / "bad" / "C07.json").read_text())
    assert failed["status"] == "fail"
    assert {c["name"] for c in failed["conditions"] if c["status"] == "fail"} >= {"max_abs_dp == 0", "k3_kl == 0"}
    assert "C07   fail" in capsys.readouterr().out


def test_bad_input_is_a_clear_error(capsys):
    for argv, message in ((["gates", "--only", "C42"], "unknown gate 'C42'"),
                          (["gates", "--model", "llama"], "unknown model 'llama'"),
                          (["gates", "--device", "tpu"], "unknown device 'tpu'"),
                          (["gates", "--model", "qwen3", "--size", "wide-cut"], "has sizes"),
                          (["gates", "--contract", "turbo"], "unknown contract 'turbo'")):
        assert main(argv) == EXIT_BAD_INPUT, argv
        assert message in capsys.readouterr().err


def test_the_gates_device_option_refuses_what_this_machine_lacks():
    """gates/device.py: an unknown device, or CUDA on a machine without it, is a clear error
    before any gate runs (CI machines have no GPU; the device tool runs --device cuda)."""
    from gates import device
    with pytest.raises(ValueError, match="'tpu' is not one of"):
        device.select("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device on this machine"):
            device.select("cuda")
        assert main(["gates", "--device", "cuda", "--only", "C7"]) == EXIT_BAD_INPUT
    assert device.target() == "cpu"
