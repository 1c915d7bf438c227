"""`harness gates --checkpoint DIR` and `harness run --checkpoint DIR` (gates/subject.py): the
gates run on a transformers checkpoint's config and weights, family from its model_type. The
consistent contract passes on it, the fast one fails C02 there; the weights the gates get are
the checkpoint's bits, not seeded ones; mistakes exit 1 with one line."""
import json

import pytest
import torch

from gates.compare import assert_bitwise_equal
from gates.conftest import GateRecord
from gates.subject import subject_config, subject_model, subject_weights
from harness.cli import main
from harness.exit_codes import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_OK
from kernels.models.checkpoint import load_checkpoint

pytest.importorskip("transformers")
from tests.tiny_checkpoints import save_tiny_qwen3  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("qwen3"), tie=False)[0])


def test_the_gates_get_the_checkpoints_bits(checkpoint):
    gate = GateRecord("C07", "qwen3", "consistent", checkpoint=checkpoint)
    config, weights = load_checkpoint(checkpoint)
    assert subject_config(gate) == config
    got = subject_weights(gate, config, model_seed=5)
    assert set(got) == set(weights)
    for name, tensor in weights.items():
        assert_bitwise_equal(got[name], tensor.to(config.torch_dtype), name)
    for name, tensor in subject_model(gate, config).state_dict().items():
        assert_bitwise_equal(tensor, weights[name].to(config.torch_dtype), f"model {name}")
    seeded = subject_weights(GateRecord("C07", "qwen3", "consistent"), config)
    assert any(not torch.equal(seeded[n], got[n]) for n in got), "seeded weights equal the checkpoint's"


def test_gates_pass_on_a_checkpoint_and_the_fast_contract_fails_there(checkpoint, tmp_path):
    out = tmp_path / "consistent"
    assert main(["gates", "--checkpoint", checkpoint, "--only", "C1,C2,C3,C7", "--out", str(out)]) == EXIT_OK
    for name in ("C01", "C02", "C03", "C07"):
        result = json.loads((out / f"{name}.json").read_text())
        assert result["status"] == "pass" and result["checkpoint"] == checkpoint and result["model"] == "qwen3"
    c03 = json.loads((out / "C03.json").read_text())
    assert all(c["name"].startswith("[checkpoint]") for c in c03["conditions"]
               if "judging process" not in c["name"]), "C03 ran a shipped size"
    assert json.loads((out / "C07.json").read_text())["inputs"][0]["config"] == f"checkpoint {checkpoint}"
    fast = tmp_path / "fast"
    assert main(["gates", "--checkpoint", checkpoint, "--contract", "fast", "--only", "C2",
                 "--out", str(fast)]) == EXIT_DIFFERENT
    assert json.loads((fast / "C02.json").read_text())["status"] == "fail"


def test_run_takes_a_checkpoint(checkpoint, tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--checkpoint", checkpoint, "--gates", "C1,C7", "--skip", "profile",
                 "--out", str(out)]) == EXIT_OK
    state = json.loads((out / "run.json").read_text())
    assert state["model"] == "qwen3" and state["checkpoint"] == checkpoint
    assert json.loads((out / "gates" / "C07.json").read_text())["checkpoint"] == checkpoint
    diff = json.loads((out / "diff" / "consistent.json").read_text())
    assert diff["size"] == f"checkpoint {checkpoint}" and diff["frac_tokens_differing"] == 0


@pytest.mark.parametrize("verb", ["gates", "run"])
def test_a_checkpoint_of_another_family_is_one_line(checkpoint, tmp_path, capsys, verb):
    argv = [verb, "--checkpoint", checkpoint, "--model", "nemotron", "--out", str(tmp_path / "x")]
    assert main(argv + (["--only", "C1"] if verb == "gates" else ["--gates", "C1"])) == EXIT_BAD_INPUT
    error = capsys.readouterr().err.strip()
    assert "holds a qwen3 checkpoint" in error and len(error.splitlines()) == 1, error
