"""locate on an outside target (harness/stages/target_locate.py, gates/targets/module_rows.py):
module rows compared by position find nothing where both sides run the same arithmetic and
the planted ulp where one differs; transformers' generate vs forward is located and the
figure recorded; a target without one module tree is n/a with the reason."""
import json

import pytest
import torch

from gates.targets.module_rows import ModuleRows, first_divergent_module
from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK, main
from tests.tiny_checkpoints import save_tiny_qwen3


class _Tiny(torch.nn.Module):
    """Two projections over embedded ids: rows [1, S, H] per module, as a causal LM's."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.embed, self.up, self.down = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, input_ids):
        return self.down(torch.relu(self.up(self.embed(input_ids))))


def _rows(model, calls) -> ModuleRows:
    rows = ModuleRows(model)
    with torch.no_grad():
        for ids in calls:
            model(input_ids=ids)
    rows.close()
    return rows


def test_same_arithmetic_is_clean_and_a_planted_ulp_is_found_where_it_was_put(fresh_seed):
    model = _Tiny(fresh_seed % 1000)
    ids = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(fresh_seed))
    whole, again = _rows(model, [ids]), _rows(model, [ids])
    found, compared = first_divergent_module(again, whole, 9)
    assert found is None and compared == 9 * 3 and whole.order == ["embed", "up", "down"]
    position = int(torch.randint(0, 9, (1,), generator=torch.Generator().manual_seed(fresh_seed + 1)))
    row = again.rows["up"][position]
    row[5] = torch.nextafter(row[5], torch.tensor(float("inf")))
    found, _ = first_divergent_module(again, whole, 9)
    assert (found["module"], found["position"], found["element"]) == ("up", position, 5)
    assert found["engine_value"] != found["trainer_value"]


def test_calls_of_one_row_follow_the_positions_of_a_prefill(fresh_seed):
    """A prefill of 5 rows then 3 one-row calls: positions 0..7, as generate's decode steps."""
    model = _Tiny(fresh_seed % 1000)
    ids = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(fresh_seed))
    stepped = _rows(model, [ids[:, :5], ids[:, 5:6], ids[:, 6:7], ids[:, 7:8]])
    assert sorted(stepped.rows["down"]) == list(range(8))
    assert torch.equal(stepped.rows["embed"][6], _rows(model, [ids]).rows["embed"][6])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), tie=False)[0])


def test_locate_on_transformers_names_a_module_and_a_guide_or_says_clean(tmp_path, checkpoint, capsys):
    code = main(["locate", "--target", "transformers", "--checkpoint", checkpoint, "--out", str(tmp_path)])
    result = json.loads((tmp_path / "locate.json").read_text())
    print(capsys.readouterr().out)  # recorded, not assumed
    assert result["rows_compared"] > 100 and code == {"divergent": EXIT_DIFFERENT, "clean": EXIT_OK}[result["status"]]
    if result["status"] == "divergent":
        assert result["module"].startswith("model.") and result["phase"] in ("prefill", "decode")
        assert result["engine_value"] != result["trainer_value"]


def test_locate_on_vllm_is_n_a_with_the_reason_and_needs_no_vllm(tmp_path, capsys):
    code = main(["locate", "--target", "vllm", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == EXIT_INCONCLUSIVE and "locate: n/a on target vllm" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "locate.json").read_text())["status"] == "n/a"


def test_locate_on_our_target_still_needs_a_model(capsys):
    assert main(["locate"]) == EXIT_BAD_INPUT and "--model" in capsys.readouterr().err
