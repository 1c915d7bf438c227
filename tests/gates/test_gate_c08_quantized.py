"""C08 on nemotron's quantized cut, through `harness gates`: a quantized weight used without its
straight-through estimator fails the gradients, FP8 weight scales one ulp off fail the bitwise
quantized weights; the plain cut, which quantizes nothing, passes both.
"""
from harness.cli import EXIT_DIFFERENT
from tests.gates.test_gate_c04_c09 import _failed, _gates, _planted


def test_c08_catches_a_quantized_weight_without_its_straight_through_estimator(tmp_path):
    """weight_quant.planted_detached: the quantized cut's forward bits are right, but no
    gradient reaches the NVFP4 experts' or the FP8 projections' master weights; the plain cut
    quantizes nothing and passes."""
    contract = _planted(tmp_path, "weight_quant", "weight_quant.planted_detached")
    code, results = _gates(tmp_path, "nemotron", "C8", contract)
    assert code == EXIT_DIFFERENT
    failed = _failed(results["C08"])
    assert {"[cut-quant] d loss / d layers.1.experts_up: relative error <= 0.0001",
            "[cut-quant] d loss / d layers.0.in_proj: relative error <= 0.0001"} <= failed
    assert not any(name.startswith("[cut]") for name in failed) and "[cut-quant] loss: relative error <= 0.0001" \
        not in failed


def test_c08_catches_fp8_weight_scales_one_ulp_off(tmp_path):
    """weight_quant.planted_reciprocal_scale: amax * fp32(1/448) for the FP8 weights' block scales
    (what CUDA computed for a CPU-scalar divisor). The gradients may well pass on a draw; the
    quantized weights' bits cannot. The plain cut quantizes nothing and passes."""
    contract = _planted(tmp_path, "weight_quant", "weight_quant.planted_reciprocal_scale")
    code, results = _gates(tmp_path, "nemotron", "C8", contract)
    assert code == EXIT_DIFFERENT
    condition = "[cut-quant] every quantized weight equals the float64 reference's quantization, bit for bit"
    assert condition in _failed(results["C08"])
    record = next(c for c in results["C08"]["conditions"] if c["name"] == condition)
    assert record["num_differing_weights"] > 0 and record["quantized_weights"] > record["num_differing_weights"]
    assert not any(name.startswith("[cut]") for name in _failed(results["C08"]))
