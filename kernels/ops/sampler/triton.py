"""The consistent Gumbel-max draw on CUDA in two Triton passes (forms.py's gumbel_argmax).

u_t = SplitMix64(row key + (t + 1) * golden) in uint64, the bits of race_uniforms' int64 torch ops;
score x_t - log(-log u_t), x read scaled or scaled here (div_rn: logprob.forms.scaled's bits);
argmax, ties to the lowest id. Pass one spreads a row's vocabulary over programs of CHUNK tokens,
pass two merges each row's chunk winners: max and min do not round, so the token is the same for
any chunk size and batch. Greedy rows score x without noise, same launch.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.splitmix import SPLITMIX64

BLOCK = 1024
CHUNK = 4096  # tokens per program of the first pass: a row's vocabulary is spread over many SMs


@triton.jit
def _chunk_best_kernel(x_ptr, keys_ptr, greedy_ptr, t_ptr, score_ptr, token_ptr, stride_x, vocab, num_chunks,
                       CHUNK: tl.constexpr, GOLDEN: tl.constexpr, MIX_1: tl.constexpr, MIX_2: tl.constexpr,
                       BLOCK: tl.constexpr, HAS_GREEDY: tl.constexpr, HAS_T: tl.constexpr):
    """Program (row, chunk): the best score of tokens [chunk * CHUNK, (chunk + 1) * CHUNK) and
    the lowest token id that reaches it; a greedy row scores x itself (no noise). HAS_T: x is
    the raw logits, scaled here by div_rn (forms.scaled's bits)."""
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    key = tl.load(keys_ptr + row).to(tl.uint64, bitcast=True)
    noise = 1.0
    if HAS_GREEDY:
        noise = tl.where(tl.load(greedy_ptr + row) != 0, 0.0, 1.0)
    temperature = 1.0
    if HAS_T:
        temperature = tl.load(t_ptr + row)
    best_score = float("-inf")
    best_token = chunk * CHUNK
    for lo in range(chunk * CHUNK, tl.minimum((chunk + 1) * CHUNK, vocab), BLOCK):
        token = lo + tl.arange(0, BLOCK)
        mask = token < vocab
        x = tl.load(x_ptr + row * stride_x + token, mask=mask, other=float("-inf")).to(tl.float32)
        if HAS_T:
            x = tl.math.div_rn(x, temperature)
        z = key + (token + 1).to(tl.uint64) * GOLDEN
        z = (z ^ (z >> 30)) * MIX_1
        z = (z ^ (z >> 27)) * MIX_2
        z = z ^ (z >> 31)
        uniform = ((z >> 41).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # 23 bits + 1/2: exact
        score = tl.where(mask, tl.where(noise == 0.0, x, x - tl.log(-tl.log(uniform))), float("-inf"))
        block_best = tl.max(score, axis=0)
        block_token = tl.min(tl.where(score == block_best, token, vocab), axis=0)
        take = block_best > best_score  # blocks in token order: an equal score keeps the lower id
        best_token = tl.where(take, block_token, best_token)
        best_score = tl.where(take, block_best, best_score)
    tl.store(score_ptr + row * num_chunks + chunk, best_score)
    tl.store(token_ptr + row * num_chunks + chunk, best_token)


@triton.jit
def _merge_kernel(score_ptr, token_ptr, out_ptr, num_chunks, vocab, CHUNKS: tl.constexpr):
    """A row's winner over its chunks: the best score, and of the chunks that reach it the
    lowest token id; the same token whatever the chunk size (max and min do not round)."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.arange(0, CHUNKS)
    mask = chunk < num_chunks
    score = tl.load(score_ptr + row * num_chunks + chunk, mask=mask, other=float("-inf"))
    token = tl.load(token_ptr + row * num_chunks + chunk, mask=mask, other=vocab)
    best = tl.max(score, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(score == best, token, vocab), axis=0).to(tl.int64))


def gumbel_argmax(x, keys, greedy=None, chunk: int = CHUNK, temperatures=None):
    """x [B, V] fp32 (logits over the temperature, dropped tokens -inf); keys [B] int64;
    greedy [B] bool or None: those rows take the plain argmax (ties to the lowest id, as
    torch.argmax), in the same launch. `chunk` (a multiple of BLOCK) moves work between
    programs, never the drawn token. temperatures [B]: x is the raw logits (fp32 or half),
    scaled in the kernel with the bits of forms.scaled, so no scaled copy is written."""
    if (x.dtype != torch.float32 and temperatures is None) or x.dim() != 2 or keys.shape != (x.shape[0],) or (
            greedy is not None and greedy.shape != keys.shape) or (
            temperatures is not None and temperatures.shape != keys.shape):
        raise ValueError(f"gumbel_argmax: x {tuple(x.shape)} {x.dtype}, keys {tuple(keys.shape)}, "
                         f"greedy {None if greedy is None else tuple(greedy.shape)}, "
                         f"temperatures {None if temperatures is None else tuple(temperatures.shape)}")
    if chunk % BLOCK:
        raise ValueError(f"chunk {chunk} must be a multiple of {BLOCK}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    rows, vocab = x.shape
    out = torch.empty(rows, dtype=torch.int64, device=x.device)
    if rows:
        golden, mix_1, mix_2 = SPLITMIX64
        num_chunks = triton.cdiv(vocab, chunk)
        scores = torch.empty((rows, num_chunks), dtype=torch.float32, device=x.device)
        tokens = torch.empty((rows, num_chunks), dtype=torch.int32, device=x.device)
        t = keys if temperatures is None else temperatures.to(x.device, torch.float32).contiguous()
        _chunk_best_kernel[(rows, num_chunks)](x, keys, keys if greedy is None else greedy, t, scores, tokens,
                                               x.stride(0), vocab, num_chunks, CHUNK=chunk, GOLDEN=golden,
                                               MIX_1=mix_1, MIX_2=mix_2, BLOCK=BLOCK, HAS_GREEDY=greedy is not None,
                                               HAS_T=temperatures is not None, num_warps=4)
        _merge_kernel[(rows,)](scores, tokens, out, num_chunks, vocab, CHUNKS=triton.next_power_of_2(num_chunks),
                               num_warps=1)
    return out
