"""The consistent GEMM's tuned launch tables (kernels/ops/gemm_tuning.py) and the script that
writes them from a device sweep (benchmarks/gemm_tune.py): only bit-checked one-slice
variants win a bucket, buckets merge and end open, and a malformed table is a clear error
naming the file. The kernels' bits under a table are the interpreter checks' job
(tests/ops/triton/test_gemm.py)."""
import json

import pytest
import torch

from benchmarks import gemm_tune
from kernels.ops import gemm_tuning


def _sample(m, kernel, config, ms, bits=True, splits=1, parallel=False, shape=(2048, 6144), cublas_ms=0.01):
    run = {"kernel": kernel, "config": config, "block_k": 64, "num_splits": splits, "parallel_splits": parallel}
    return {"N": shape[0], "K": shape[1], "M": m, "run": run, "ms": ms, "cublas_ms": cublas_ms,
            "bits_equal_rows_of_largest_M": bits}


def test_the_fastest_bit_checked_variant_wins_each_bucket(tmp_path):
    samples = [
        _sample(1, "pointer", [16, 16, 4, 4], 0.010), _sample(1, "tma", [16, 32, 4, 4], 0.008, bits=False),
        _sample(1, "pointer", [16, 64, 4, 4], 0.005, splits=4, parallel=True),  # K in slices: never tabled
        _sample(8, "pointer", [16, 16, 4, 4], 0.011), _sample(8, "tma", [16, 32, 4, 4], 0.012),
        _sample(64, "tma", [64, 32, 4, 4], 0.013), _sample(64, "pointer", [16, 16, 4, 4], 0.020),
        _sample(4096, "persistent", [128, 128, 4, 4], 0.3),
        {"N": 2048, "K": 6144, "M": 4096, "error": "OutOfResources"},
    ]
    rows = gemm_tune.table(samples)["2048x6144"]
    assert rows == [[8, "pointer", [16, 16, 4, 4], 64], [64, "tma", [64, 32, 4, 4], 64],
                    [None, "persistent", [128, 128, 4, 4], 64]]
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps({"shapes": {"2048x6144": rows}}))
    assert gemm_tuning.load(path)[(2048, 6144)][1] == (64, "tma", (64, 32, 4, 4), 64)


def test_the_default_rows_take_the_best_geometric_mean_over_every_shape(tmp_path):
    """Per M, the variant fastest on average relative to cuBLAS over all shapes wins; a variant
    missing on a shape, or not bit-exact on one, cannot be a default."""
    other = (4096, 2048)
    samples = [
        _sample(8, "pointer", [16, 16, 4, 4], 0.010), _sample(8, "pointer", [16, 16, 4, 4], 0.020, shape=other),
        _sample(8, "tma", [16, 32, 4, 4], 0.012), _sample(8, "tma", [16, 32, 4, 4], 0.012, shape=other),
        _sample(8, "persistent", [16, 16, 4, 4], 0.001),  # timed on one shape only
        _sample(64, "tma", [64, 32, 4, 4], 0.001), _sample(64, "tma", [64, 32, 4, 4], 0.001, bits=False, shape=other),
        _sample(64, "pointer", [64, 64, 4, 4], 0.02), _sample(64, "pointer", [64, 64, 4, 4], 0.02, shape=other),
    ]
    rows = gemm_tune.default_rows(samples)
    assert rows == [[8, "tma", [16, 32, 4, 4], 64], [None, "pointer", [64, 64, 4, 4], 64]]
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps({"shapes": gemm_tune.table(samples), "default": rows}))
    assert gemm_tuning.load(path)[gemm_tuning.DEFAULT][0] == (8, "tma", (16, 32, 4, 4), 64)


def test_a_shape_swept_only_at_some_m_counts_only_there():
    """A focused sweep that adds a shape at M 64 leaves the defaults at M 8, where it was not
    timed, to the shapes that were; at M 64 a default must have run on the new shape too."""
    added = (3712, 2688)
    samples = [
        _sample(8, "pointer", [16, 16, 4, 4], 0.010),
        _sample(64, "tma", [64, 32, 4, 4], 0.010), _sample(64, "tma", [64, 32, 4, 4], 0.010, shape=added),
        _sample(64, "pointer", [64, 64, 4, 4], 0.001),  # fastest, but not timed on the added shape
    ]
    assert gemm_tune.default_rows(samples) == [[8, "pointer", [16, 16, 4, 4], 64], [None, "tma", [64, 32, 4, 4], 64]]


def test_a_later_sweep_replaces_an_earlier_one_at_the_shapes_and_m_it_timed():
    """A focused re-sweep wins where it timed (all its variants there, the earlier run's
    timings dropped even where faster), the earlier sweep keeps everything else."""
    full = [_sample(8, "pointer", [16, 16, 4, 4], 0.010), _sample(64, "tma", [64, 32, 4, 4], 0.002),
            _sample(64, "pointer", [64, 64, 4, 4], 0.020), {"shape": "x", "M": 64, "variant": "v", "error": "E"}]
    focused = [_sample(64, "tma", [64, 16, 4, 5], 0.004), _sample(64, "pointer", [64, 64, 4, 4], 0.030)]
    samples = gemm_tune.merged([full, focused])
    assert samples == [full[0]] + focused
    assert gemm_tune.table(samples)["2048x6144"] == [[8, "pointer", [16, 16, 4, 4], 64],
                                                     [None, "tma", [64, 16, 4, 5], 64]]


@pytest.mark.parametrize("shapes, message", [
    ({"2048x6144": [[8, "cutlass", [16, 16, 4, 4], 64], [None, "tma", [64, 32, 4, 4], 64]]}, "malformed row"),
    ({"2048x6144": [[8, "tma", [16, 16, 4], 64], [None, "tma", [64, 32, 4, 4], 64]]}, "malformed row"),
    ({"2048x6144": [[64, "tma", [16, 16, 4, 4], 64], [8, "tma", [64, 32, 4, 4], 64]]}, "buckets must rise"),
    ({"2048x6144": [[8, "tma", [16, 16, 4, 4], 64]]}, "open"),
    ({"2048-6144": [[None, "tma", [16, 16, 4, 4], 64]]}, "NxK"),
    ({"2048x6144": []}, "no rows"),
])
def test_a_malformed_table_is_an_error_naming_the_file(tmp_path, shapes, message):
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps({"shapes": shapes}))
    with pytest.raises(ValueError, match=message) as error:
        gemm_tuning.load(path)
    assert str(path) in str(error.value)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        gemm_tuning.load(path)


def test_the_environment_names_the_table_and_a_missing_one_is_an_error(tmp_path, monkeypatch):
    assert gemm_tuning.table_for(torch.device("cpu")) == {}
    monkeypatch.setenv(gemm_tuning.ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="no such file"):
        gemm_tuning.table_for(torch.device("cpu"))
    assert gemm_tuning.path_for("NVIDIA H200").name == "gemm-nvidia-h200.json"
