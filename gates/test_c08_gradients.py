"""Gate C08: gradients.

Passes when, for a loss sum_t c_t * logp_t (random c_t) over the completion tokens of a few
sequences on the model's cut run in float32, the loss and every parameter's gradient from the
contract's trainer_bwd forward and autograd have relative error at most TOLERANCE (1e-4)
against a float64 reference: |a - ref| / |ref| (L2 norms) for a gradient, and for the loss
|loss - ref| / sum_t |c_t * ref logp_t|, the size of its terms (random signs can make the sum
nearly cancel; relative to the loss itself the figure measured the cancellation: 1.16e-4 on
one seed whose loss was 1/2355 of its terms, 4.9e-8 relative to the terms). The float32 run (the config's bf16
overridden) makes the figure measure the gradient formulas, not bf16 rounding, which C01-C04
and C07 judge bit for bit. The reference is independent where the arithmetic is: the same model
definition (its wiring of splits, reshapes and residual adds is plain tensor plumbing) runs on
a float64 copy of the weights with every region replaced by its float64 formula from
gates/reference, differentiated by torch autograd; MoE routing reuses the tested side's expert
choice, a discrete decision with no gradient, and inputs that put a Mamba dt within 1e-4
(relative) of time_step_min, where the clamp's gradient jumps, are redrawn (at most 4 draws,
each recorded). Every shipped size runs, the quantized cut included, whose quantizers are
straight-through estimators: the reference's quantized weight is gates/reference/quant.py's
float64 quantization of the master weight (FP8 128x128 blocks or NVFP4, as every contract
stores it), its FP8 activations and FP8 KV take the tested side's quantized values (the
scale and rounding decisions, which C02-C04 judge bit for bit), and every one passes its
gradient through unchanged; the reference must have taken every kind of quantization the
config names (else the size proved nothing). Negative controls: the consistent contract with mlp_act bound to
activation.planted_wrong_gradient fails it on qwen3, and with weight_quant bound to
weight_quant.planted_detached (the same forward, no gradient to the master weight) on the
quantized cut.
"""
import contextlib
import copy
import dataclasses

import torch

from gates import device
from gates.inputs import fresh_seed, generator
from gates.reference import activation as ref_activation
from gates.reference import attention as ref_attention
from gates.reference import linear as ref_linear
from gates.reference import logprob as ref_logprob
from gates.reference import moe as ref_moe
from gates.reference import norm as ref_norm
from gates.reference import quant as ref_quant
from gates.reference import rope as ref_rope
from gates.reference import ssm as ref_ssm
from gates.subject import parametrize_sizes, subject_config, subject_label, subject_model
from kernels.contract import load_contract
from kernels.models.dispatch import RegionDispatch
from kernels.trainer.logprobs import ScoredSequence, sequence_logprobs

TOLERANCE = 1e-4
KINK_BAND, MAX_DRAWS = 1e-4, 4  # dt = clamp(softplus(.), min=time_step_min) has a kink: draws near it are redrawn
LINEAR_REGIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head", "ssm_in_proj", "ssm_out_proj")


class ReferenceDispatch:
    """Called by the model like RegionDispatch; every region is its float64 reference formula.
    `tested` holds the tested forward's discrete decisions, per (region, layer) in call order:
    the MoE expert ids ("topk"), the FP8 activations ("act_quant") and the K and V an FP8 KV
    store received ("attention")."""

    def __init__(self, tested: dict):
        self.tested = tested
        self.near_kinks = 0
        self.quantized = {"weights": 0, "activations": 0, "kv": 0}  # straight-through points taken

    def selecting_rows(self, rows):
        return contextlib.nullcontext()  # row selections only matter to tracers

    def __call__(self, region, case, layer, *args, **kwargs):
        if region in LINEAR_REGIONS:
            return ref_linear.linear(*args)
        return getattr(self, region)(layer, *args, **kwargs)

    def embed(self, layer, tokens, table):
        return table[tokens]

    def norm(self, layer, x, w, *, eps, residual=None):
        return ref_norm.rmsnorm(x, w, eps=eps, residual=residual)

    qk_norm = norm

    def rope(self, layer, q, k, positions, *, theta, max_position):
        return ref_rope.rope(q, positions, theta=theta), ref_rope.rope(k, positions, theta=theta)

    def _next(self, region, layer):
        return self.tested[(region, layer)].pop(0)

    def attention(self, layer, q, k, v, segments, kv, *, scale):
        if any(s.start != 0 for s in segments):
            raise ValueError("the reference attends over whole sequences (packed trainer layout)")
        if getattr(kv, "kv_format", "auto") == "fp8":  # E4M3 at a static scale of 1, straight through
            stored = (ref_quant.round_to_grid(ref_quant.fp32(t.double()), ref_quant.e4m3_grid(), ref_quant.E4M3_SIGN)[1]
                      for t in self._next("attention", layer))
            k, v = (exact + (quantized - exact).detach() for exact, quantized in zip((k, v), stored))
            self.quantized["kv"] += 1
        return torch.cat([ref_attention.causal_gqa(q[s.rows], k[s.rows], v[s.rows], 0, scale=scale)
                          for s in segments])

    def mlp_act(self, layer, gate, up):
        return ref_activation.silu_mul(gate, up)

    def logprob(self, layer, logits, targets, temperatures, *, full=False):
        return ref_logprob.logprob(logits, targets, temperatures, full=full)

    def ssm_conv(self, layer, xbc, segments, store, weight, bias):
        if any(s.start != 0 for s in segments):
            raise ValueError("the reference convolves whole sequences from position 0")
        return torch.cat([ref_ssm.conv_silu(xbc[s.rows], weight, bias) for s in segments])

    def ssm_scan(self, layer, x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min):
        dt = torch.nn.functional.softplus(dt_raw.double() + dt_bias.double())
        self.near_kinks += int(((dt - dt_min).abs() <= KINK_BAND * dt_min).sum())
        return torch.cat([ref_ssm.scan(x[s.rows], B[s.rows], C[s.rows], dt_raw[s.rows], dt_bias, A_log, D, dt_min)
                          for s in segments])

    def ssm_norm(self, layer, y, z, w, *, eps, group_size):
        return ref_ssm.gated_norm(y, z, w, eps, group_size)

    def router(self, layer, x, w):
        return ref_moe.router(x, w)

    def topk(self, layer, scores, bias, *, top_k, scaling):
        ids = self._next("topk", layer)
        return ids, ref_moe.routing_weights(scores, ids, scaling)

    def expert_gemm(self, layer, x, ids, weights, up, down):
        every = torch.stack([ref_moe.expert(x, up[e], down[e]) for e in range(up.shape[0])])  # [E, M, H]
        return every[ids, torch.arange(x.shape[0])[:, None]]  # [M, k, H], unweighted

    def shared_expert(self, layer, x, up, down):
        return ref_moe.expert(x, up, down)

    mlp = shared_expert

    def moe_combine(self, layer, slots, ids, weights, shared):
        return (slots * weights.unsqueeze(-1)).sum(dim=1) + shared

    def weight_quant(self, layer, w, *, fmt):
        if fmt == "none":
            return w
        exact = (ref_quant.fp8_quantize(w, "block_128x128") if fmt == "fp8" else ref_quant.nvfp4_quantize(w)).dequantized
        self.quantized["weights"] += 1
        return w + (ref_quant.to_output(exact, torch.float32).double() - w).detach()

    def act_quant(self, layer, x, *, fmt):
        if fmt == "none":
            return x
        self.quantized["activations"] += 1
        return x + (self._next("act_quant", layer).double() - x).detach()


def _sequences(gen, vocab_size):
    """Three sequences; prompt + completion lengths cross the SSM chunk (16) and a KV block."""
    shapes = ((5, 9, 1.0), (12, 7, 0.7), (8, 10, 1.0))
    draw = lambda n: tuple(int(t) for t in torch.randint(1, vocab_size, (n,), generator=gen))
    return [ScoredSequence(draw(p), draw(c), temperature) for p, c, temperature in shapes]


def _loss_and_grads(model, dispatch, sequences, coefficients):
    model.zero_grad(set_to_none=True)
    logprobs = torch.cat(sequence_logprobs(model, dispatch, sequences, "trainer_bwd"))
    terms = coefficients.to(logprobs.dtype).to(logprobs.device) * logprobs
    loss = terms.sum()
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}, float(terms.detach().abs().sum())


def _both_sides(model, reference_model, contract, gen):
    """Fresh sequences and coefficients; (loss, grads, sum of |loss terms|) of the tested side and the reference's,
    and the reference's dispatch (near_kinks: how many dt lay within the kink band of
    time_step_min; quantized: the straight-through points it took)."""
    sequences = _sequences(gen, model.config.vocab_size)
    coefficients = torch.randn(sum(len(s.completion) for s in sequences), generator=gen, dtype=torch.float64)
    decisions = {}

    def keep_decisions(call):  # the reference runs on the CPU
        kept = {"topk": lambda: call.output[0], "act_quant": lambda: call.output,
                "attention": lambda: (call.args[1].detach().cpu(), call.args[2].detach().cpu())}
        fp8_kv = call.region == "attention" and getattr(call.args[4], "kv_format", "auto") == "fp8"
        if call.region in ("topk", "act_quant") and call.kwargs.get("fmt") != "none" or fp8_kv:
            value = kept[call.region]()
            decisions.setdefault((call.region, call.layer), []).append(
                value if isinstance(value, tuple) else value.detach().cpu())

    tested = _loss_and_grads(model, RegionDispatch(contract, [keep_decisions]), sequences, coefficients)
    reference_dispatch = ReferenceDispatch(decisions)
    reference = _loss_and_grads(reference_model, reference_dispatch, sequences, coefficients)
    return sequences, tested, reference, reference_dispatch


def _relative_error(value, reference) -> float:
    scale = float(reference.double().norm())
    return float((value.double().cpu() - reference.double()).norm()) / scale if scale > 0 else float("inf")


pytest_generate_tests = parametrize_sizes  # cut, and cut-quant (NVFP4 and FP8 weights, FP8 activations and KV)


def test_gradients_match_float64_reference(gate, size):
    config = dataclasses.replace(subject_config(gate, size), dtype="float32")
    seed, contract = fresh_seed(), load_contract(gate.contract)
    gen = generator(seed)
    model = subject_model(gate, config, seed % 1000)
    reference_model = copy.deepcopy(model).double()  # float64, on the CPU
    model = model.to(device.target())
    near_kinks = []
    while len(near_kinks) < MAX_DRAWS and (not near_kinks or near_kinks[-1]):
        sequences, (loss, grads, _), (ref_loss, ref_grads, ref_terms), reference_dispatch = _both_sides(
            model, reference_model, contract, gen)
        near_kinks.append(reference_dispatch.near_kinks)
    gate.inputs = {"seed": seed, "config": subject_label(gate, size), "dtype": "float32",
                   "sequences": [[len(s.prompt), len(s.completion), s.temperature] for s in sequences]}
    formats = [getattr(config, name, "none") for name in ("expert_quant", "mamba_proj_quant")]
    wanted = {"weights": any(f != "none" for f in formats), "activations": "fp8" in formats[1:],
              "kv": getattr(config, "kv_cache_dtype", "auto") == "fp8"}
    if any(wanted.values()):  # the quantized size: its straight-through points must have run
        taken = reference_dispatch.quantized
        gate.check(f"[{size}] the reference took every quantized path the config names", all(
            taken[kind] > 0 for kind, named in wanted.items() if named), straight_through_points=taken)
    if "ssm_scan" in config.REGIONS:
        gate.check(f"[{size}] every Mamba dt lies {KINK_BAND:g} (relative) or more from time_step_min, where its gradient "
                   "jumps", near_kinks[-1] == 0, near_kink_dt_per_draw=near_kinks, max_draws=MAX_DRAWS)
    error = abs(float(loss) - float(ref_loss)) / ref_terms
    gate.check(f"[{size}] loss: relative error <= {TOLERANCE:g}", error <= TOLERANCE, relative_error=error,
               tolerance=TOLERANCE, loss=float(loss), reference_loss=float(ref_loss),
               reference_sum_abs_terms=ref_terms)
    for name, grad in grads.items():
        reference = ref_grads[name]
        if grad is None or reference is None:
            gate.check(f"[{size}] d loss / d {name}: relative error <= {TOLERANCE:g}", False, tested=grad is not None,
                       reference=reference is not None, note="no gradient reached the parameter")
            continue
        error = _relative_error(grad, reference)
        gate.check(f"[{size}] d loss / d {name}: relative error <= {TOLERANCE:g}", error <= TOLERANCE,
                   relative_error=error, tolerance=TOLERANCE, reference_norm=float(reference.norm()))
    gate.verdict()
