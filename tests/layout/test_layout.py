"""Layouts on torch.distributed (gloo, 4 forked processes, loopback): column- and row-parallel
linear and vocab-parallel log-prob give the same bits at TP 1, 2 and 4, the MoE at EP 1, 2
and 4, the trainer's scores and reduced gradients at DP 1 and 2; the rank-order arithmetic
(the fast contract's layouts) changes the bits of every reduction (the negative controls).
Bad layout configurations are clear errors. Inputs are fresh per run (BITWISE_SEED replays).
"""
import dataclasses
import os
import random
from types import SimpleNamespace

import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.layout_sides import preload_for_fork
from kernels.contract import ContractError, load_contract
from kernels.contract.dispatch import LayoutDispatch, check_layout
from kernels.layout import expert_parallel, tensor_parallel
from kernels.layout.groups import build_groups
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout, SideLayouts, load_side_layouts
from kernels.layout.policy import LayoutPolicy
from kernels.layout.tree import owned_leaves, tree_sum
from kernels.models.config import load_model_config
from kernels.ops.topk.consistent import topk_consistent
from kernels.trainer.logprobs import ScoredSequence

RANK_ORDER = LayoutPolicy("rank_order", "rank_order", "rank_order")
DEGREES = (1, 2, 4)


def _policies():
    return {"fixed_tree": load_contract("consistent").layout, "rank_order": RANK_ORDER}


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(shape, generator=g)).to(torch.bfloat16)
    scores = torch.rand(11, 8, generator=g)
    ids, weights = topk_consistent(scores, torch.zeros(8), top_k=3, scaling=2.5)
    return {"x_col": randn(13, 256), "w_col": randn(512, 256, scale=0.05), "x_row": randn(13, 768),
            "w_row": randn(256, 768, scale=0.05), "logits": randn(512, 1024, scale=3.0),  # many rows: a sum's
            # last-bit change survives the log in a few percent of them
            "targets": torch.randint(0, 1024, (512,), generator=g), "temperatures": 0.5 + torch.rand(512, generator=g),
            "x_moe": randn(11, 64), "ids": ids, "weights": weights, "up": randn(8, 32, 64, scale=0.1),
            "down": randn(8, 64, 32, scale=0.1), "shared": randn(11, 64)}


def _op_worker(rank, seed):
    """Every TP and EP degree with both arithmetics; rank 0's outputs by (policy, degree)."""
    data, contract, out = _inputs(seed), load_contract("consistent"), {}
    linear = contract.op("down_proj", "trainer_fwd")
    experts, combine = contract.op("expert_gemm", "trainer_fwd"), contract.op("moe_combine", "trainer_fwd")
    for name, policy in _policies().items():
        for degree in DEGREES:
            tp = build_groups(Layout(tp=degree))
            if tp is not None:
                axis = dict(axis=tp.tp, policy=policy)
                out[name, "column", degree] = tensor_parallel.column_parallel(linear, data["x_col"], data["w_col"],
                                                                              **axis)
                out[name, "row", degree] = tensor_parallel.row_parallel(linear, data["x_row"], data["w_row"], **axis)
                out[name, "logprob", degree] = tensor_parallel.vocab_parallel_logprob(
                    data["logits"], data["targets"], data["temperatures"], **axis)
            ep = build_groups(Layout(ep=degree))
            if ep is not None:
                args = (data["x_moe"], data["ids"], data["weights"], data["up"], data["down"])
                if name == "fixed_tree":
                    slots = expert_parallel.routed_experts(experts, *args, axis=ep.ep)
                    out[name, "moe", degree] = combine(slots, data["ids"], data["weights"], data["shared"])
                else:
                    slots = expert_parallel.local_experts(experts, *args, axis=ep.ep)
                    out[name, "moe", degree] = expert_parallel.rank_order_combine(
                        combine, slots, data["ids"], data["weights"], data["shared"], axis=ep.ep)
    return out


def _sequences(seed, vocab_size):
    rng = random.Random(seed)
    return [ScoredSequence(tuple(rng.randrange(1, vocab_size) for _ in range(rng.randint(4, 10))),
                           tuple(rng.randrange(1, vocab_size) for _ in range(rng.randint(2, 5))),
                           rng.choice([1.0, 0.7])) for _ in range(5)]


def _dp_worker(rank, seed):
    """Trainer scores and one update at DP 1 and 2, both arithmetics (qwen3 cut, 5 sequences,
    micro-batches of 2: DP 2 splits them 2 + 1, or deals sequences round robin)."""
    from kernels.trainer.trainer import Trainer
    config = load_model_config("qwen3-cut")
    sequences = _sequences(seed, config.vocab_size)
    advantages = torch.randn(5, generator=torch.Generator().manual_seed(seed)).tolist()
    out = {}
    for name, policy in _policies().items():
        contract = dataclasses.replace(load_contract("consistent"), layout=policy)
        for degree in (1, 2):
            groups = build_groups(Layout(dp=degree))
            if groups is None:
                continue
            trainer = Trainer(config, contract, seed=seed % 1000, micro_batch_size=2, parallel=groups)
            scores = trainer.score(sequences)
            step = trainer.train_step(sequences, advantages, scores)
            out[name, degree] = {"scores": scores, "gradients": step["gradients"], "loss": step["loss"]}
    return out


def _seed():
    return int(os.environ.get("BITWISE_SEED", random.SystemRandom().randrange(2**31)))


@pytest.fixture(scope="module")
def op_runs():
    seed = _seed()
    return seed, run_processes(_op_worker, 4, seed)


@pytest.fixture(scope="module")
def dp_runs():
    seed = _seed()
    preload_for_fork()
    return seed, run_processes(_dp_worker, 2, seed)


@pytest.mark.parametrize("op", ["column", "row", "logprob", "moe"])
def test_fixed_tree_gives_the_same_bits_at_every_degree(op_runs, op):
    seed, out = op_runs
    for degree in DEGREES[1:]:
        assert_bitwise_equal(out["fixed_tree", op, degree], out["fixed_tree", op, 1],
                             f"{op} at degree {degree} vs 1 (BITWISE_SEED={seed})")


@pytest.mark.parametrize("op", ["row", "logprob", "moe"])
def test_rank_order_reductions_follow_the_degree(op_runs, op):
    """Negative control: the same ops reduced in rank order differ between degrees."""
    seed, out = op_runs
    for degree in DEGREES[1:]:
        assert first_bit_difference(out["rank_order", op, degree], out["rank_order", op, 1]) is not None, \
            f"{op}: rank-order reduction at degree {degree} equals degree 1 (BITWISE_SEED={seed})"


def test_expert_parallel_equals_the_single_process_moe(op_runs):
    """Routing-order EP changes nothing: each expert row and the slot-order combine are C2-invariant."""
    seed, out = op_runs
    data, contract = _inputs(seed), load_contract("consistent")
    args = (data["x_moe"], data["ids"], data["weights"], data["up"], data["down"])
    slots = contract.op("expert_gemm", "trainer_fwd")(*args)
    single = contract.op("moe_combine", "trainer_fwd")(slots, data["ids"], data["weights"], data["shared"])
    assert_bitwise_equal(out["fixed_tree", "moe", 4], single, f"EP4 vs one process (BITWISE_SEED={seed})")


def test_data_parallel_scores_and_gradients(dp_runs):
    seed, out = dp_runs
    for index, (wide, one) in enumerate(zip(out["fixed_tree", 2]["scores"], out["fixed_tree", 1]["scores"])):
        assert_bitwise_equal(wide, one, f"DP2 vs DP1 scores, sequence {index} (BITWISE_SEED={seed})")
    for name, grad in out["fixed_tree", 1]["gradients"].items():
        assert grad.abs().sum() > 0, f"{name}: a zero gradient proves nothing"
        assert_bitwise_equal(out["fixed_tree", 2]["gradients"][name], grad,
                             f"DP2 vs DP1 d/d {name} (BITWISE_SEED={seed})")
    assert out["fixed_tree", 2]["loss"] == out["fixed_tree", 1]["loss"]
    rank_order = out["rank_order", 2]["gradients"], out["rank_order", 1]["gradients"]
    differing = [n for n in rank_order[1] if first_bit_difference(rank_order[0][n], rank_order[1][n])]
    assert differing, f"negative control: all-reduced DP2 gradients equal DP1's (BITWISE_SEED={seed})"


def test_tree_of_subtrees_is_the_tree():
    leaves = [torch.randn(4096) for _ in range(8)]
    whole = tree_sum(leaves)
    for ranks in (1, 2, 4, 8):
        per = 8 // ranks
        assert_bitwise_equal(tree_sum([tree_sum(leaves[r * per:(r + 1) * per]) for r in range(ranks)]), whole)
    in_order = leaves[0]
    for leaf in leaves[1:]:
        in_order = in_order + leaf
    assert first_bit_difference(in_order, whole) is not None  # the order is what the tree fixes


def test_layout_configuration_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="tp: must be a positive integer, got 0"):
        Layout(tp=0)
    with pytest.raises(ValueError, match="cannot read 'XX4'"):
        Layout.parse("TP2 XX4")
    with pytest.raises(ValueError, match="tp given twice"):
        Layout.parse("tp2 tp4")
    assert Layout.parse("tp2, EP4") == Layout(tp=2, ep=4) and Layout(tp=2, ep=4).world_size == 8
    with pytest.raises(ValueError, match="exactly 'engine' and 'trainer'"):
        SideLayouts.from_config({"engine": "TP2"})
    with pytest.raises(ValueError, match=r"layouts.engine: unknown keys \['pp'\]"):
        SideLayouts.from_config({"engine": {"tp": 2, "pp": 2}, "trainer": "TP1"})
    path = tmp_path / "sides.yaml"
    path.write_text("engine: TP2\ntrainer: {tp: 1, ep: 4}\n")
    assert load_side_layouts(path) == SideLayouts(Layout(tp=2), Layout(ep=4))
    with pytest.raises(ValueError, match="a power of two"):
        LayoutPolicy("fixed_tree", "routing_order", "fixed_tree", num_leaves=3)
    with pytest.raises(ValueError, match="only tp_reduce fixed_tree has leaves"):
        LayoutPolicy("rank_order", "rank_order", "rank_order", num_leaves=4)
    with pytest.raises(ValueError, match="tp: 8 ranks cannot share the contract's 4 leaves"):
        load_contract("consistent").layout.check_tp(8)
    with pytest.raises(ValueError, match="10 elements do not cut into 4 equal leaves"):
        owned_leaves(10, 4, 0, 1, "row-parallel K")


def test_layouts_that_do_not_fit_the_side_or_model_are_refused(tmp_path):
    qwen3, nemotron = load_model_config("qwen3-cut"), load_model_config("nemotron-cut")
    with pytest.raises(ValueError, match="dp: the engine is one data-parallel replica"):
        check_layout(Layout(dp=2), qwen3, "engine")
    with pytest.raises(ValueError, match="ep: qwen3 has no routed experts"):
        check_layout(Layout(ep=2), qwen3, "trainer")
    with pytest.raises(ValueError, match="ep: 16 routed experts do not split over 3 ranks"):
        check_layout(Layout(ep=3), nemotron, "trainer")
    bare = dataclasses.replace(load_contract("consistent"), layout=None)
    with pytest.raises(ValueError, match="has no layout section"):
        LayoutDispatch(bare, SimpleNamespace(layout=Layout(tp=2)))
    text = open(load_contract("consistent").source).read().replace("tp_reduce: fixed_tree", "tp_reduce: magic")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ContractError, match="layout.tp_reduce: 'magic' is not one of"):
        load_contract(tmp_path / "bad.yaml")


def test_nccl_with_more_ranks_than_gpus_is_a_clear_error():
    """One GPU per NCCL rank: asking for more ranks than GPUs fails before any process starts."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match=f"{gpus + 1} ranks need {gpus + 1} GPUs, this machine has {gpus}"):
        run_processes(tree_sum, gpus + 1, backend="nccl")


@pytest.mark.parametrize("num_pairs", [0, 7])
def test_packed_dispatch_moves_every_bit(num_pairs):
    """Routing-order EP sends a pair's row, expert id and weight packed as bytes in one
    all-to-all: unpacking gives the same bits back (signed zeros included), also for a rank
    that sends no pairs."""
    rows = torch.randn(num_pairs, 6).to(torch.bfloat16)
    ids = torch.randint(0, 64, (num_pairs,))
    weights = torch.rand(num_pairs)
    if num_pairs:
        rows[0, 0], weights[1] = -0.0, -0.0
        assert rows.view(torch.int16)[0, 0] != 0 and weights.view(torch.int32)[1] != 0  # the -0.0s are there
    packed = expert_parallel._pack(rows, ids, weights)
    assert packed.dtype == torch.uint8 and packed.shape == (num_pairs, 6 * 2 + 8 + 4)
    got = expert_parallel._unpack(packed, (rows.dtype, 6), (ids.dtype, 1), (weights.dtype, 1))
    for back, sent in zip(got, (rows, ids, weights)):
        assert back.shape == sent.shape
        assert_bitwise_equal(back, sent, "packed dispatch")
