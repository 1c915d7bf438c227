"""C02's row replay (gates/row_replay.py): every row-wise region's call site replayed on all
the rows it saw, one call against calls of 1-64 rows. Faults it exists for: a kernel constant
that follows the row count in a reduction whose bf16 output hides it (RMSNorm's sum in halves
below 16 rows moves about one element in 10^6; the probes compare some 10^4), caught on the
norms' rows widened to fp32; and what the replay must not take for rows (a weight whose
length equals one call's rows), nor count as coverage (a site seen at one row count)."""
import json

import torch

from gates.row_replay import RowCapture, replay
from harness.cli import EXIT_DIFFERENT, main
from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.contract.regions import CASES
from tests.planted_contracts import planted

NORMS = ("norm", "qk_norm")


def _c02(tmp_path, model, contract):
    out = tmp_path / "out"
    code = main(["gates", "--model", model, "--only", "C2", "--contract", str(contract), "--out", str(out)])
    return code, json.loads((out / "C02.json").read_text())


def test_c02s_replay_catches_a_norm_sum_that_follows_the_rows_on_fp32_rows(tmp_path):
    binding = {"impl": "norm.planted_sum_in_halves_below_16_rows"}
    contract = planted(tmp_path, {(region, case): binding for region in NORMS for case in CASES})
    code, result = _c02(tmp_path, "qwen3", contract)
    replays = [c for c in result["conditions"] if "row-wise region" in c["name"]]
    assert code == EXIT_DIFFERENT and len(replays) == len(CASES)
    for condition in replays:
        assert condition["status"] == "fail" and condition["first_difference"]["region"] in NORMS, condition
        assert condition["first_difference"]["call_rows"] < 16 <= condition["first_difference"]["whole_rows"]
        assert any(name.endswith("(fp32 rows)") for name in condition["differing_sites"]), condition


def _norm_call(capture, dispatch, rows, generator):
    x = torch.randn(rows, 16, generator=generator).to(torch.bfloat16)
    dispatch("norm", "trainer_fwd", 0, x, torch.ones(16, dtype=torch.bfloat16), eps=1e-6)


def test_the_replay_takes_only_arguments_that_follow_the_rows(fresh_seed):
    """A weight of 16 elements meets a call of 16 rows: it follows the rows at that capture
    only, so it stays whole; the site replays (three row counts) and its rows agree."""
    generator = torch.Generator().manual_seed(fresh_seed)
    capture = RowCapture()
    dispatch = RegionDispatch(load_contract("consistent"), [capture])
    for rows in (3, 16, 70):
        capture.start()
        _norm_call(capture, dispatch, rows, generator)
    record = replay(RegionDispatch(load_contract("consistent")), capture)
    assert record["sites"] == 1 and record["widened_sites"] == 1 and record["rows"] == [89, 89]
    assert record["differing_rows"] == 0 and not record["skipped"], record


def test_a_site_seen_at_one_row_count_is_skipped_with_its_reason(fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    capture = RowCapture()
    dispatch = RegionDispatch(load_contract("consistent"), [capture])
    for _ in range(3):
        capture.start()
        _norm_call(capture, dispatch, 5, generator)
    record = replay(dispatch, capture)
    assert record["sites"] == 0 and record["skipped"] == {"seen at one row count": 1}
