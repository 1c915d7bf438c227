"""Parity of our DeepseekModel with transformers' DeepseekV4ForCausalLM, through the checkpoint
loader (kernels/models/hf_deepseek.py): a random float32 model with every attention kind, hash and
Top-K routing and two streams, saved by save_pretrained (DeepSeek's own tensor names). The logits of
a packed batch match transformers' per-sequence ones within LOGIT_TOLERANCE under the consistent
contract, once transformers' indexer breaks score ties by our unique key (larger block first):
its torch.topk leaves ties (a block that all heads' ReLUs zero) in its own order, and the test
proves such ties occurred. Unsupported configs and broken checkpoints fail with the field named."""
import json
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before transformers is imported

import pytest
import torch
from safetensors.torch import load_file, save_file

from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.hf_deepseek import load_hf_deepseek
from kernels.models.state import TransientCache

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_model  # noqa: E402

LOGIT_TOLERANCE = 1e-5  # relative to max |logit|; measured 1.0e-6 (float32, transformers 5.24)
LAYER_TYPES = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
               "compressed_sparse_attention"]
SIZES = dict(vocab_size=512, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=1, head_dim=32, q_lora_rank=48, qk_rope_head_dim=8, num_experts_per_tok=2,
             n_routed_experts=8, n_shared_experts=1, o_groups=2, o_lora_rank=24, index_n_heads=2, index_head_dim=16,
             index_topk=3, sliding_window=8, hc_mult=2, layer_types=LAYER_TYPES, num_hash_layers=1,
             max_position_embeddings=512,
             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})


def _randomized(model, seed):
    """Every weight drawn afresh: norms near 1, hyper-connection scales in [0.5, 1.5], a hash
    table of distinct experts per token, a non-zero selection bias."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif p.dim() == 1 and not name.endswith(("base", "sinks")):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("tid2eid"):
                experts, k = SIZES["n_routed_experts"], SIZES["num_experts_per_tok"]
                b.copy_(torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(b.shape[0])]))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(0.01 * torch.randn(b.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek")
    model = _randomized(transformers.DeepseekV4ForCausalLM(transformers.DeepseekV4Config(**SIZES)), 1).eval()
    model.save_pretrained(directory)
    return directory, model


def test_logits_match_transformers_with_ties_broken_by_the_unique_key(checkpoint, monkeypatch):
    directory, reference = checkpoint
    ties, scorer = [], hf_model.DeepseekV4IndexerScorer.forward

    def unique_key(self, q, compressed_kv, hidden_states):  # + 1e-12 x block: exact ties go to the larger block
        scores = scorer(self, q, compressed_kv, hidden_states)
        ties.append(int((scores == 0).sum()))
        return scores + 1e-12 * torch.arange(scores.shape[-1], dtype=scores.dtype)

    monkeypatch.setattr(hf_model.DeepseekV4IndexerScorer, "forward", unique_key)
    config, ours = load_hf_deepseek(directory, dtype="float32")
    rng = random.Random(3)
    sequences = [[rng.randrange(1, config.vocab_size) for _ in range(n)] for n in (50, 23, 9)]
    dispatch = RegionDispatch(load_contract("consistent"), [])
    batch = TokenBatch.from_sequences([(s, 0, ids) for s, ids in enumerate(sequences)], "trainer_fwd")
    with torch.no_grad():
        logits = ours.logits(ours(batch, dispatch, TransientCache(config.num_layers)), dispatch, "trainer_fwd")
        for segment, ids in zip(batch.segments, sequences):
            expected = reference(torch.tensor([ids])).logits[0].double()
            error = float((logits[segment.rows].double() - expected).abs().max() / expected.abs().max())
            print(f"sequence of {len(ids)}: consistent vs transformers {error:.2e} (tolerance {LOGIT_TOLERANCE:g})")
            assert error <= LOGIT_TOLERANCE
    assert sum(ties) > 0, "no zero indexer score: the tie-break was not exercised"


def _edited(directory, tmp_path, drop=None, **changes):
    """A copy of the checkpoint with config.json changed, or one tensor left out."""
    document = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**document, **changes}))
    tensors = load_file(directory / "model.safetensors")
    save_file({name: t for name, t in tensors.items() if name != drop}, tmp_path / "model.safetensors")
    return tmp_path


@pytest.mark.parametrize("changes, named", [
    ({"rope_parameters": {"main": {"rope_type": "default", "rope_theta": 1e4},
                          "compress": {"rope_type": "yarn", "rope_theta": 1.6e5, "factor": 16}}}, "rope_parameters"),
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"mlp_layer_types": ["moe", "hash_moe", "moe", "moe"]}, "mlp_layer_types"),
    ({"model_type": "deepseek_v3"}, "model_type"),
])
def test_unsupported_configs_are_refused_by_name(checkpoint, tmp_path, changes, named):
    with pytest.raises(ValueError, match=named):
        load_hf_deepseek(_edited(checkpoint[0], tmp_path, **changes), dtype="float32")


def test_a_missing_tensor_is_named(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="layers.1.attn.indexer.compressor.ape"):
        load_hf_deepseek(_edited(checkpoint[0], tmp_path, drop="model.layers.1.attn.indexer.compressor.ape"),
                         dtype="float32")


def test_the_gates_take_a_deepseek_checkpoint(checkpoint, tmp_path):
    """`--checkpoint DIR` picks the family from model_type: engine == trainer (C07) on the
    checkpoint's weights under the consistent contract. (C07 and C02 both caught the 2-column GEMM
    fault this float32 shape met first; the fast contract's C07 failure is
    tests/harness/test_deepseek_end_to_end.py's negative control.)"""
    from harness.cli import main
    from harness.exit_codes import EXIT_OK
    directory = str(checkpoint[0])
    out = tmp_path / "consistent"
    assert main(["gates", "--checkpoint", directory, "--only", "C7", "--out", str(out)]) == EXIT_OK
    result = json.loads((out / "C07.json").read_text())
    assert (result["status"], result["model"], result["checkpoint"]) == ("pass", "deepseek", directory)
