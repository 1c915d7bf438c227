"""Parity of our Qwen3Model with transformers' Qwen3ForCausalLM, through the checkpoint
loader (kernels/models/hf_checkpoint.py).

Weights must load bit for bit (fused rows equal the HF rows they came from); float32 logits
of a packed batch must match HF's per-sequence logits within LOGIT_TOLERANCE under both
contracts; RoPE must match at positions up to 8k (ROPE_TOLERANCE of exact, transformers' own
fp32 drift stated and bounded); `harness diff --checkpoint` runs the checkpoint's weights.
The loader's config reading and its refusals of broken checkpoints: tests/models/test_hf_checkpoint_config.py.
Tiny random models, CPU, no network: `python -m pytest tests/models/test_hf_parity.py -q`.
"""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before transformers is imported

import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.models.hf_checkpoint import load_hf_checkpoint, weight_sources

transformers = pytest.importorskip("transformers")
from tests.models.parity import fixed_sequences, max_diff, packed_logits  # noqa: E402
from tests.tiny_checkpoints import VOCAB, save_tiny_qwen3  # noqa: E402

# Measured on CPU fp32 (transformers 5.24, sdpa): max |Δlogit| ~2e-6 with max |logit| ~2.7,
# i.e. a few fp32 ulps of the largest logit, for both contracts. 1e-5 relative leaves ~10x
# headroom, while the negative control below (gate/up fused in the wrong order) is ~1.2.
LOGIT_TOLERANCE = 1e-5
SEQUENCE_LENGTHS = (5, 17, 40)  # 40 > block_kv (32): the consistent kernel walks two blocks
SEQUENCES = fixed_sequences(SEQUENCE_LENGTHS, VOCAB)


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("tied"), tie=True)


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    # Sharded, so the index.json path of the loader is exercised too.
    return save_tiny_qwen3(tmp_path_factory.mktemp("untied"), tie=False, max_shard_size="200KB")


@pytest.fixture(params=["tied", "untied"])
def checkpoint(request):
    return request.getfixturevalue(request.param)


def _hf_logits(hf_model, sequences):
    with torch.no_grad():
        return [hf_model(input_ids=torch.tensor([ids])).logits[0] for ids in sequences]


def test_sharded_checkpoint_has_an_index(untied):
    directory, _ = untied
    assert (directory / "model.safetensors.index.json").exists()
    assert len(list(directory.glob("*.safetensors"))) > 1


def test_weights_load_bit_exact(checkpoint):
    directory, hf_model = checkpoint
    config, model = load_hf_checkpoint(directory, dtype="float32")
    hf_state = hf_model.state_dict()
    parameters = dict(model.named_parameters())
    assert set(parameters) == set(weight_sources(config))
    assert hasattr(model, "lm_head") != config.tie_word_embeddings
    for ours, names in weight_sources(config).items():
        expected = torch.cat([hf_state[name] for name in names], dim=0)
        assert_bitwise_equal(parameters[ours], expected, ours)


@pytest.mark.parametrize("contract_name", ["fast", "consistent"])
def test_logits_match_transformers(checkpoint, contract_name):
    directory, hf_model = checkpoint
    _, model = load_hf_checkpoint(directory, dtype="float32")
    sequences = SEQUENCES
    theirs = _hf_logits(hf_model, sequences)
    ours = packed_logits(model, contract_name, sequences)
    scale = max(1.0, max(float(t.abs().max()) for t in theirs))
    diff = max_diff(ours, theirs)
    assert all(o.dtype == torch.float32 for o in ours)
    assert diff <= LOGIT_TOLERANCE * scale, (
        f"{contract_name}: max |Δlogit| {diff:.3e} > {LOGIT_TOLERANCE:g} * {scale:.3f}")


def test_tolerance_catches_a_misfused_weight(tied):
    """Negative control: gate and up fused in the wrong order must fail the tolerance."""
    directory, hf_model = tied
    _, model = load_hf_checkpoint(directory, dtype="float32")
    with torch.no_grad():
        gate, up = model.layers[0].gate_up_proj.chunk(2, dim=0)
        model.layers[0].gate_up_proj.copy_(torch.cat([up, gate]))
    sequences = SEQUENCES
    diff = max_diff(packed_logits(model, "consistent", sequences), _hf_logits(hf_model, sequences))
    assert diff > 100 * LOGIT_TOLERANCE, f"swapped gate/up went unnoticed: {diff:.3e}"


ROPE_POSITIONS = 8192
ROPE_TOLERANCE = 2.0 ** -22
"""|ours - exact| <= ROPE_TOLERANCE * max|x| at every position (a few fp32 ulps: the table is
float64 rounded once). transformers' fp32 angles p * inv_freq drift with the position:
|theirs - exact| <= (4 * 2^-24 * p + 2^-21) * max|x| (two roundings of an angle up to p rad,
then cos / sin of it), measured 1.1e-4 at p = 8191 where ours stays near 1e-7."""


def _exact_rope(x, positions, theta):
    head_dim = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.double()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)[:, None, :]
    x = x.double()
    rotated = torch.cat([-x[..., head_dim // 2:], x[..., :head_dim // 2]], dim=-1)
    return x * angles.cos() + rotated * angles.sin()


def test_rope_matches_transformers_to_8k_positions(fresh_seed):
    """Both contracts' RoPE against a float64 reference and transformers' Qwen3 rotary
    embedding at random positions up to 8191 (0 and 8191 included): the consistent one within
    ROPE_TOLERANCE of exact at every position; transformers within its own position-growing
    bound of exact, and ours within that bound of transformers; the fast one (fp32 angles,
    as transformers) within the same bound. Negative control: theta off by 1e-6 leaves the
    tolerance at long positions."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

    from kernels.ops.rope.consistent import consistent as rope_consistent
    from kernels.ops.rope.fast import fast as rope_fast
    theta, head_dim, heads = 1_000_000.0, 32, 4
    generator = torch.Generator().manual_seed(fresh_seed)
    positions = torch.cat([torch.tensor([0, ROPE_POSITIONS - 1]),
                           torch.randint(0, ROPE_POSITIONS, (254,), generator=generator)])
    x = torch.randn(positions.numel(), heads, head_dim, generator=generator)
    hf_config = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=heads * head_dim, num_attention_heads=heads,
                                         num_key_value_heads=heads, head_dim=head_dim, rope_theta=theta,
                                         max_position_embeddings=ROPE_POSITIONS)
    cos, sin = Qwen3RotaryEmbedding(hf_config)(x, positions[None])
    theirs = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], cos, sin)[0][0].transpose(0, 1)
    exact = _exact_rope(x, positions, theta)
    scale = x.abs().amax(dim=(1, 2)).double()

    def error(got, want):  # per position, relative to the row's largest |x|
        return (got.double() - want.double()).abs().amax(dim=(1, 2)) / scale

    hf_bound = 4 * 2.0 ** -24 * positions.double() + 2.0 ** -21
    ours = rope_consistent(x, x, positions, theta=theta, max_position=ROPE_POSITIONS)[0]
    fast = rope_fast(x, x, positions, theta=theta, max_position=ROPE_POSITIONS)[0]
    far = int(positions.argmax())
    print(f"\nRoPE at position {int(positions[far])}: |consistent - exact| {error(ours, exact)[far]:.2e}, "
          f"|transformers - exact| {error(theirs, exact)[far]:.2e}, |fast - exact| {error(fast, exact)[far]:.2e} "
          f"(x max |x|; tolerance {ROPE_TOLERANCE:.2e}, transformers' bound {hf_bound[far]:.2e})")
    assert bool((error(ours, exact) <= ROPE_TOLERANCE).all()), f"consistent RoPE off exact, seed {fresh_seed}"
    assert bool((error(theirs, exact) <= hf_bound).all()), f"transformers outside its bound, seed {fresh_seed}"
    assert bool((error(ours, theirs) <= hf_bound + ROPE_TOLERANCE).all()), f"ours vs transformers, seed {fresh_seed}"
    assert bool((error(fast, exact) <= hf_bound).all()), f"fast RoPE outside the fp32 bound, seed {fresh_seed}"
    off = rope_consistent(x, x, positions, theta=theta * (1 + 1e-6), max_position=ROPE_POSITIONS)[0]
    assert float(error(off, exact)[far]) > 100 * ROPE_TOLERANCE, f"negative control unseen, seed {fresh_seed}"


def test_diff_takes_a_checkpoint_directory_and_its_family_from_model_type(tied, capsys):
    """`harness diff --checkpoint DIR` runs the checkpoint's own weights, family from
    config.json's model_type: the consistent contract gives 0 differing tokens, the fast one
    differs (the same weights, so the figures are the checkpoint's, not seeded ones)."""
    from harness.cli import main
    from harness.exit_codes import EXIT_OK
    directory = str(tied[0])
    small = ["--num-sequences", "4", "--new-tokens", "6", "--json"]
    assert main(["diff", "--checkpoint", directory, *small]) == EXIT_OK
    consistent = json.loads(capsys.readouterr().out)
    assert consistent["model"] == "qwen3" and consistent["size"] == f"checkpoint {directory}"
    assert consistent["frac_tokens_differing"] == 0 and consistent["num_tokens"] == 24
    assert main(["diff", "--checkpoint", directory, "--model", "qwen3", "--contract", "fast", *small]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["frac_tokens_differing"] > 0, "negative control: fast differs"
