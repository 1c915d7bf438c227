"""The DeepSeek-V4 cut (kernels/models/deepseek.py) on CPU: under the consistent contract every
phase gives the same logits bits, whole trainer forward, whole prefill, chunked prefill at splits
before, at and after the compressor's windows, and token-by-token decode, with sequences crossing
many windows and queries that see more blocks than the indexer keeps (its Top-K chooses); a
sequence alone and inside a batch agree too; with the FP8 KV cache of the quantized cut the engine
keeps E4M3 codes, the trainer their round trip, and the phases still agree. The fast contract
differs (negative control)."""
import dataclasses
import random

import torch

from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.config import load_model_config
from kernels.models.registry import build_model
from kernels.models.state import TransientCache

CONFIG = load_model_config("deepseek-cut")


class BlocksSeen:
    """Observer: the most compressed blocks any CSA query could see (the indexer's choice is real
    only past index_topk)."""

    def __init__(self):
        self.most = 0

    def __call__(self, call) -> None:
        if call.region == "block_score":
            self.most = max(self.most, call.output.shape[-1])


def _phases(model, contract, sequences, steps, observers=(), cache=None):
    """{seq: [rows, V] logits} of forwards of `steps` [(size, case)] on one fresh cache."""
    dispatch = RegionDispatch(load_contract(contract), list(observers))
    config = model.config
    cache = cache or TransientCache(config.num_layers, config.kv_cache_dtype)
    done, logits = [0] * len(sequences), {}
    with torch.no_grad():
        for size, case in steps:
            pieces = [(s, done[s], ids[done[s]:done[s] + size]) for s, ids in enumerate(sequences)
                      if done[s] < len(ids)]
            if not pieces:
                break
            batch = TokenBatch.from_sequences(pieces, case)
            out = model.logits(model(batch, dispatch, cache), dispatch, case)
            for segment in batch.segments:
                logits.setdefault(segment.seq_id, []).append(out[segment.rows])
                done[segment.seq_id] += segment.length
    return {s: torch.cat(parts) for s, parts in logits.items()}


def _setup(seed, config=CONFIG):
    rng = random.Random(seed)
    sequences = [[rng.randrange(1, config.vocab_size) for _ in range(n)] for n in (rng.randint(60, 80),
                                                                                  rng.randint(25, 45))]
    return build_model(config, seed % 1000), sequences


PHASES = {"whole prefill": [(10 ** 6, "engine_prefill")],
          **{f"chunks of {n}": [(n, "engine_prefill")] * 100 for n in (3, CONFIG.compress_rate_csa,
                                                                       CONFIG.compress_rate_hca + 1)},
          "token-by-token decode": [(1, "engine_prefill")] + [(1, "engine_decode")] * 100}


def test_consistent_phases_give_the_trainers_bits():
    seed = fresh_seed()
    model, sequences = _setup(seed)
    seen = BlocksSeen()
    reference = _phases(model, "consistent", sequences, [(10 ** 6, "trainer_fwd")], [seen])
    assert seen.most > CONFIG.index_topk, (seed, seen.most)  # the indexer chose among more blocks
    for name, steps in PHASES.items():
        got = _phases(model, "consistent", sequences, steps)
        for s in reference:
            assert first_bit_difference(got[s], reference[s]) is None, (seed, name, s)
    alone = _phases(model, "consistent", sequences[1:], [(10 ** 6, "trainer_fwd")])
    assert first_bit_difference(alone[0], reference[1]) is None, seed


def test_fast_phases_differ():
    seed = fresh_seed()
    model, sequences = _setup(seed)
    reference = _phases(model, "fast", sequences, [(10 ** 6, "trainer_fwd")])
    for name in ("whole prefill", "token-by-token decode"):
        got = _phases(model, "fast", sequences, PHASES[name])
        rows = sum(int((got[s].view(torch.int16) != reference[s].view(torch.int16)).any(-1).sum()) for s in got)
        print(f"seed {seed}: fast {name}: {rows} of {sum(map(len, sequences))} rows' logits differ from trainer_fwd")
        assert rows > 0


def test_fp8_kv_phases_agree_the_engine_keeping_e4m3_codes():
    """The quantized cut (FP8 experts, W8A8 dense projections, FP8 KV and indexer keys): decode
    and chunked prefill keep E4M3 codes and read them back into one workspace; the trainer keeps
    their round trip: the same logits bits. The KV round trip is real: without it the same
    weights give other logits."""
    seed, quantized = fresh_seed(), load_model_config("deepseek-cut-quant")
    model, sequences = _setup(seed, quantized)
    reference = _phases(model, "consistent", sequences, [(10 ** 6, "trainer_fwd")])
    for name in ("chunks of 3", "token-by-token decode"):
        cache = TransientCache(quantized.num_layers, quantized.kv_cache_dtype)
        got = _phases(model, "consistent", sequences, PHASES[name], cache=cache)
        for s in reference:
            assert first_bit_difference(got[s], reference[s]) is None, (seed, name, s)
        kept = cache.compressed(1).state(0)
        assert {t.dtype for t in (*kept.keys, *kept.blocks, *kept.index_keys)} == {torch.float8_e4m3fn}, (seed, name)
        assert kept.index_keys, (seed, name)  # layer 1 is a CSA layer: its indexer closed blocks
    model.config = dataclasses.replace(quantized, kv_cache_dtype="auto")
    unquantized = _phases(model, "consistent", sequences, [(10 ** 6, "trainer_fwd")])
    differing = sum(int((unquantized[s] != reference[s]).any(-1).sum()) for s in reference)
    print(f"seed {seed}: {differing} of {sum(map(len, sequences))} rows' logits move without the FP8 KV round trip")
    assert differing > 0, seed


def test_the_wide_cut_is_the_release_at_full_width_with_every_attention_kind():
    """deepseek-wide-cut (the GPU gates' and benchmarks' size) differs from deepseek-v4-flash only
    in its layers, experts and hash layers: every width, head, window and format is the release's."""
    wide, release = load_model_config("deepseek-wide-cut"), load_model_config("deepseek-v4-flash")
    wide.validate()
    cut_down = {"layer_pattern", "n_routed_experts", "num_hash_layers"}
    differing = {f.name for f in dataclasses.fields(wide) if getattr(wide, f.name) != getattr(release, f.name)}
    assert differing == cut_down, differing
    assert set(wide.layer_pattern) == {"S", "C", "H"} and wide.n_routed_experts >= wide.num_experts_per_tok


def test_the_cuda_gathers_backward_adds_each_rows_gradients_in_index_order(fresh_seed):
    """deepseek_attention._CudaGather (the window and block gathers' backward on CUDA, where
    index_select's adds with atomics) run on CPU tensors: its gradient is index_select's own, bit
    for bit (both add a row's gradients in index order), with rows gathered many times over.
    Negative control: the same sums in the reverse order differ."""
    from kernels.models.deepseek_attention import _CudaGather
    generator = torch.Generator().manual_seed(fresh_seed)
    rows = torch.randn(50, 16, generator=generator)
    ids = torch.randint(0, 50, (960,), generator=generator)  # each row ~19 times
    weights = torch.randn(960, 16, generator=generator)

    def gradient(gather, order):
        leaf = rows.clone().requires_grad_()
        (gather(leaf, ids[order]) * weights[order]).sum().backward()
        return leaf.grad

    forward = torch.arange(960)
    ours = gradient(_CudaGather.apply, forward)
    assert first_bit_difference(ours, gradient(lambda r, i: r.index_select(0, i), forward)) is None, fresh_seed
    assert first_bit_difference(ours, gradient(_CudaGather.apply, forward.flip(0))) is not None, fresh_seed
