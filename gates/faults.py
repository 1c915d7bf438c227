"""Planted faults: implementations with one deliberate bug each, registered under names a
contract can use (`<family>.planted_<bug>`), so tests can show every gate catching a fault
of its own kind. Other faults need no code: a contract that maps one case of a region to a
fast variant (split-K in decode only, the one-step recurrence in decode, two roundings in
one phase) is the planted fault. The CUDA kernels' plants live in gates/faults_cuda.py."""
import random
import sys
from functools import partial

import torch
import torch.nn.functional as F

from gates import faults_cuda
from gates.faults_cuda import kernel_module
from kernels.ops import quant
from kernels.ops.registry import implementation, register_variant
from kernels.trainer.rl_loop import GRPORun


def _consistent(family: str):
    """The family's shipped consistent variant, by its registry name: the same in a base commit's
    kernels from before the family folders, which the judge's gates also run on."""
    return implementation(f"{family}.consistent")


def combine_reverse_order(slot_outputs, ids, weights, shared_out):
    """The consistent combine, but slots summed k-1 .. 0 (a combine in the wrong order)."""
    return _consistent("moe_combine")(slot_outputs.flip(1), ids, weights.flip(1), shared_out)


def combine_bf16_reverse_order(slot_outputs, ids, weights, shared_out):
    """Slots summed k-1 .. 0 in the activation dtype, each partial rounded (a combine that
    accumulates into its bf16 output, in the wrong order), then + shared. Unlike the fp32
    reverse order above, whose bits move only where a sum straddles a bf16 rounding boundary
    (a handful of elements per layer, or none), it moves the bits of most rows: a fault that
    locate can be tested on whatever the workload's data."""
    weighted = (slot_outputs.float() * weights.float().unsqueeze(-1)).to(slot_outputs.dtype)
    total = weighted[:, -1]
    for slot in range(weighted.shape[1] - 2, -1, -1):
        total = total + weighted[:, slot]
    return total + shared_out.to(slot_outputs.dtype)


def topk_highest_id_wins(scores, bias, *, top_k, scaling):
    """Unique-key top-k with ties going to the HIGHEST expert id (an unstable tie-break)."""
    flipped = _consistent("topk")(scores.flip(-1), bias.flip(-1), top_k=top_k, scaling=scaling)
    return scores.shape[-1] - 1 - flipped[0], flipped[1]


def block_topk_lowest_position_wins(scores, positions, *, top_k, compress_rate):
    """The indexer's selection with ties going to the SMALLER position (a stable sort without the
    reversal): a query tied across the k-th block keeps another block."""
    from kernels.ops.block_topk import forms as block_forms  # a base commit's tree may predate the family

    num_blocks = scores.shape[-1]
    masked = scores.masked_fill(~block_forms.visible(positions, num_blocks, compress_rate), float("-inf"))
    order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[:, :min(top_k, num_blocks)]
    chosen = block_forms.with_sentinel(order, positions, compress_rate, top_k)
    return torch.sort(chosen, dim=-1, descending=True).values


def block_topk_zero_signs_ranked(scores, positions, *, top_k, compress_rate):
    """The indexer's selection with -0.0 below +0.0, as a top-k over the scores' bit patterns (a
    radix select) ranks them: a query whose k-th place falls among zeros of both signs differs."""
    negative_zero = (scores == 0) & torch.signbit(scores)
    nudged = torch.where(negative_zero, torch.full_like(scores, -torch.finfo(scores.dtype).tiny), scores)
    return _consistent("block_topk")(nudged, positions, top_k=top_k, compress_rate=compress_rate)


def hash_weights_reverse_order(scores, ids, *, scaling):
    """The hash router's weights over a slot sum taken k-1 .. 0 (the table's order reversed)."""
    return _consistent("hash_topk")(scores, ids.flip(-1), scaling=scaling).flip(-1)


class _SiluMulNoGateGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return _consistent("activation")(gate, up)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        silu = gate.float() * torch.sigmoid(gate.float())
        return torch.zeros_like(gate), (grad.float() * silu).to(up.dtype)  # d/dgate dropped


def silu_mul_inference_two_roundings(gate, up):
    """SiLU(gate)*up rounded once, but twice in inference mode (the engine's): a fused kernel
    that only the no-autograd path takes, as activation.fast picks one on CUDA. A gate that
    calls the engine's ops outside the mode the engine runs them in cannot see it."""
    if torch.is_inference_mode_enabled():
        return F.silu(gate) * up
    return _consistent("activation")(gate, up)


def silu_mul_wrong_gradient(gate, up):
    """Consistent forward bits, but the backward drops the gate's term (a wrong gradient)."""
    return _SiluMulNoGateGradient.apply(gate, up)


def linear_atomic_split_k(x, w, *, num_splits: int):
    """y = x @ w^T with K cut into `num_splits` slices whose partials, each rounded to x's
    dtype, are added in the order the OS entropy draws, as atomics land in scheduling order
    (run-to-run nondeterminism: C01's negative control; the CPU paths are deterministic)."""
    bounds = torch.linspace(0, x.shape[-1], num_splits + 1).round().long().tolist()
    slices = list(zip(bounds[:-1], bounds[1:]))
    random.SystemRandom().shuffle(slices)
    total = torch.zeros(x.shape[:-1] + (w.shape[0],), dtype=x.dtype, device=x.device)
    for lo, hi in slices:
        total = total + F.linear(x[..., lo:hi].float(), w[:, lo:hi].float()).to(x.dtype)
    return total


def linear_thread_split_k(x, w, *, row_multiple: int, out_dtype=None):
    """The consistent linear with K cut into one slice per intra-op thread, each slice's
    output rounded to x's dtype and the slices added in order (per-thread partials, as a
    kernel that parallelises the reduction over its pool): one thread gives the consistent
    bits, two give others. A gate that never varies the thread count cannot see it."""
    num_splits = torch.get_num_threads()
    if num_splits == 1 or out_dtype == torch.float32:
        return _consistent("linear")(x, w, row_multiple=row_multiple, out_dtype=out_dtype)
    bounds = torch.linspace(0, x.shape[-1], num_splits + 1).round().long().tolist()
    total = None
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = _consistent("linear")(x[..., lo:hi].contiguous(), w[:, lo:hi].contiguous(), row_multiple=row_multiple)
        total = part if total is None else total + part
    return total


def norm_sum_in_halves_below_16_rows(x, w, *, eps, residual=None):
    """The consistent RMSNorm, but a call of fewer than 16 rows sums each row's squares as two
    halves added last (a lane count that follows the rows). Its output is rounded to bf16 from
    an fp32 sum that moved by an ulp, so a bf16 element rarely changes: rows widened to fp32
    (C02's row replay) show it every time."""
    if x.numel() // x.shape[-1] >= 16:
        return _consistent("norm")(x, w, eps=eps, residual=residual)
    h = x if residual is None else x + residual
    h32 = h.float()
    half = h32.shape[-1] // 2
    squares = h32 * h32
    variance = (squares[..., :half].sum(-1, keepdim=True) + squares[..., half:].sum(-1, keepdim=True)) / h32.shape[-1]
    return (h32 * torch.rsqrt(variance + eps) * w.float()).to(x.dtype), (None if residual is None else h)


def sampler_keeps_every_tie(logits, params_list, draw_indices):
    """The consistent sampler's per-row draws, but top-k keeps every token tied with the k-th
    (the threshold rule engines use): deterministic and batch invariant, so only a rule check
    on crafted ties at the k-th place can see it."""
    x, greedy, keys = kernel_module("sampler.forms", "sampler")._rows(logits, params_list, draw_indices)
    truncated = kernel_module("sampler.fast", "sampler")._fast_truncated(x, params_list)
    return kernel_module("sampler.consistent", "sampler").consistent_draw(truncated, greedy, keys)


def attention_graph_baked_block_kv(q, k, v, segments, kv, *, scale, block_kv: int, row_multiple: int):
    """The consistent walk, but its key block doubled once the step's longest context (read
    on the host from the segments) passes block_kv: eager steps choose from the real batch,
    a CUDA-graph capture bakes the choice for its dummy one-token rows (a shape shortcut:
    C05's negative control; eager, every phase of a sequence sees the same bits only by luck)."""
    longest = max(s.start + s.length for s in segments)
    chosen = 2 * block_kv if longest > block_kv else block_kv
    return _consistent("attention")(q, k, v, segments, kv, scale=scale, block_kv=chosen, row_multiple=row_multiple)


def attention_bf16_split_kv(q, k, v, segments, kv, *, scale, tokens_per_split: int, max_splits: int):
    """Flash-decoding whose split outputs are stored in the activation dtype before the
    log-sum-exp merge (a kernel with a bf16 workspace). attention.fast_split_kv merges fp32
    partials and moves the bf16 output of only a few percent of decode tokens (none, on some
    workloads); rounding every partial moves most rows, so shrink can be tested on it."""
    kv.write_segments(segments, k, v)
    split = partial(kernel_module("attention.fast", "attention")._split_kv, scale=scale,
                    tokens_per_split=tokens_per_split, max_splits=max_splits,
                    workspace_dtype=q.dtype)
    return kernel_module("attention.forms", "attention")._each_segment(split, q, segments, kv)


def attention_split_past_long_context(q, k, v, segments, kv, *, scale, block_kv: int, row_multiple: int,
                                      long_context: int, tokens_per_split: int, max_splits: int):
    """The consistent walk until a step's longest context passes `long_context`, then
    flash-decoding with a bf16 workspace (a split that engines switch on for long contexts
    only): no gate whose probes stop short of the threshold can see it."""
    if max(s.start + s.length for s in segments) <= long_context:
        return _consistent("attention")(q, k, v, segments, kv, scale=scale, block_kv=block_kv,
                                        row_multiple=row_multiple)
    return attention_bf16_split_kv(q, k, v, segments, kv, scale=scale, tokens_per_split=tokens_per_split,
                                   max_splits=max_splits)


HIDDEN_CONTEXT = 1024  # the hidden threshold: no contract constant names it


def attention_split_past_hidden_context(q, k, v, segments, kv, *, scale, block_kv: int, row_multiple: int):
    """The consistent walk until a step's longest context passes 1024 tokens, a threshold
    written in the kernel rather than the contract, then flash-decoding with a bf16
    workspace: only a probe of more than a thousand tokens meets it."""
    if max(s.start + s.length for s in segments) <= HIDDEN_CONTEXT:
        return _consistent("attention")(q, k, v, segments, kv, scale=scale, block_kv=block_kv,
                                        row_multiple=row_multiple)
    return attention_bf16_split_kv(q, k, v, segments, kv, scale=scale, tokens_per_split=64, max_splits=16)


_TRUE_RESUME = GRPORun.resume  # bound before a test replaces GRPORun.resume with the fault below


def resume_losing_rng_state(directory, config, contract, settings, **kwargs):
    """GRPORun.resume, but the resumed run restarts its random stream: every request's sampling
    seed and arrival derive from (run seed, step), and this resume restores the weights, the
    optimizer and the data position but not the step the stream is at (a resume that loses
    RNG state: C09's resume conditions must catch it). Planted by replacing GRPORun.resume."""
    run = _TRUE_RESUME(directory, config, contract, settings, **kwargs)
    run.step_index = 0
    return run


def linear_slow_repeat(x, w, *, row_multiple: int, out_dtype=None, repeats: int = 6):
    """The consistent linear computed `repeats` times, the last kept: the same bits at about
    `repeats` times the CPU work (a planted slow path: C10 must fail it, and must fail it on
    CPU time, which a neighbour process does not move)."""
    for _ in range(repeats - 1):
        _consistent("linear")(x, w, row_multiple=row_multiple, out_dtype=out_dtype)
    return _consistent("linear")(x, w, row_multiple=row_multiple, out_dtype=out_dtype)


def logprob_fast_in_a_worker(logits, targets, temperatures, *, full=False):
    """The consistent log-prob, but the engine-style log_softmax in a `python -c` process (what
    C10's timed and reference workers are): a path switched where it is timed. C10 must catch
    it by its trainer, whose scores (trainer_fwd, left consistent) the engine's bits then miss."""
    variant = implementation("logprob.fast_log_softmax" if sys.argv[0] == "-c" else "logprob.consistent")
    return variant(logits, targets, temperatures, full=full)


def weight_round_trip_detached(w, *, fmt):
    """The quantized weight's forward bits, detached from the master weight: no gradient
    reaches it (a quantizer used without its straight-through estimator). C08 must fail it
    on the quantized cut."""
    return implementation("weight_quant.round_trip")(w if fmt == "none" else w.detach(), fmt=fmt)


def weight_round_trip_reciprocal_scale(w, *, fmt):
    """FP8 weights whose 128x128 block scale is amax * fp32(1/448), a multiply by the reciprocal
    (what CUDA does for a CPU-scalar divisor), not the true quotient: one ulp off for about half
    the blocks, an element's rounding flipped only now and then. C08's bitwise weights must fail it."""
    if fmt != "fp8":
        return implementation("weight_quant.round_trip")(w, fmt=fmt)

    def round_trip(v):
        v32 = v.float()
        scale = quant._group_amax(v32, 128, 128) * torch.tensor(1 / quant.E4M3_MAX, dtype=torch.float32)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = quant.saturating_e4m3(v32 / quant._expand(scale, 128, 128, v.shape))
        return quant.fp8_dequantize(q, scale, "block_128x128", v.dtype)
    return quant.ste(w, round_trip)


PLANTED = {
    ("linear", "planted_slow_repeat"): linear_slow_repeat,
    ("linear", "planted_atomic_split_k"): linear_atomic_split_k,
    ("linear", "planted_thread_split_k"): linear_thread_split_k,
    ("moe_combine", "planted_reverse_order"): combine_reverse_order,
    ("moe_combine", "planted_bf16_reverse_order"): combine_bf16_reverse_order,
    ("topk", "planted_highest_id_wins"): topk_highest_id_wins,
    ("block_topk", "planted_lowest_position_wins"): block_topk_lowest_position_wins,
    ("block_topk", "planted_zero_signs_ranked"): block_topk_zero_signs_ranked,
    ("hash_topk", "planted_reverse_order"): hash_weights_reverse_order,
    ("norm", "planted_sum_in_halves_below_16_rows"): norm_sum_in_halves_below_16_rows,
    ("sampler", "planted_keeps_every_tie"): sampler_keeps_every_tie,
    ("activation", "planted_wrong_gradient"): silu_mul_wrong_gradient,
    ("activation", "planted_inference_two_roundings"): silu_mul_inference_two_roundings,
    ("attention", "planted_graph_baked_block_kv"): attention_graph_baked_block_kv,
    ("attention", "planted_bf16_split_kv"): attention_bf16_split_kv,
    ("attention", "planted_split_past_long_context"): attention_split_past_long_context,
    ("attention", "planted_split_past_hidden_context"): attention_split_past_hidden_context,
    ("logprob", "planted_fast_in_a_worker"): logprob_fast_in_a_worker,
    ("weight_quant", "planted_detached"): weight_round_trip_detached,
    ("weight_quant", "planted_reciprocal_scale"): weight_round_trip_reciprocal_scale,
}


def register_all() -> None:
    """Every plant whose family the tree's registry knows (a base commit's may predate some)."""
    for (family, variant), function in {**PLANTED, **faults_cuda.PLANTED}.items():
        try:
            register_variant(family, variant, function)
        except ValueError:
            continue
