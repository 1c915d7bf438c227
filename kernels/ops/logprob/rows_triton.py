"""Log-probs of chosen tokens straight from the logits on CUDA: no [R, V] fp32 copy is written.

x = fp32(l) / t by an IEEE division (div_rn: the bits of forms.scaled), lse = logsumexp(x), and
logp = x[target] - lse. `consistent_rows`, in three launches whose order follows V alone: programs
(row, CHUNK of the vocabulary) take their chunk's max; programs (row, chunk) again take the row's
max (the maximum of the chunk maxima: a max does not round) and their chunk's sum of exp(x - max)
(a [BLOCK] accumulator, lane i summing i, i + BLOCK, ... in order, reduced once by tl.sum); one
program per row adds the chunk sums left to right and takes the log. CHUNK, BLOCK and num_warps
follow V alone, so a row's bits never follow the row count, and a lone row still spreads over V /
CHUNK programs. The engine and the trainer (through an autograd Function, logprob/consistent.py)
launch these kernels on logits of one dtype: the same code, the same bits. `fast_rows`: as tuned
engines fuse it, one online-softmax pass per chunk, the chunks merged by log-sum-exp. Imports
Triton: CUDA machines (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

FAST_CHUNK, FAST_BLOCK = 8192, 2048  # the fast pass: tokens per program, tokens per step
CHUNK = 8192  # the consistent passes' tokens per program (rows shorter than it: one chunk)


def consistent_launch(vocab: int) -> tuple:
    """(BLOCK, num_warps) of the consistent passes' steps over a row of `vocab` tokens: a
    function of V alone."""
    block = min(2048, triton.next_power_of_2(max(vocab, 16)))
    return block, 8 if block >= 2048 else 4


@triton.jit
def _scaled_block(x_ptr, t, idx, end, HAS_T: tl.constexpr):
    x = tl.load(x_ptr + idx, mask=idx < end, other=float("-inf")).to(tl.float32)
    if HAS_T:
        x = tl.math.div_rn(x, t)
    return x


@triton.jit
def _temperature(t_ptr, row, HAS_T: tl.constexpr):
    t = 1.0
    if HAS_T:
        t = tl.load(t_ptr + row)
    return t


@triton.jit
def _row_max(max_ptr, row, num_chunks, CHUNKS: tl.constexpr):
    """The row's max: the maximum of its chunk maxima (a max does not round)."""
    chunk = tl.arange(0, CHUNKS)
    return tl.max(tl.load(max_ptr + row * num_chunks + chunk, mask=chunk < num_chunks, other=float("-inf")), axis=0)


@triton.jit
def _chunk_max_kernel(x_ptr, t_ptr, max_ptr, vocab, num_chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                      HAS_T: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)  # rows * vocab may pass 2**31
    row_ptr, offs, t = x_ptr + row * vocab, tl.arange(0, BLOCK), _temperature(t_ptr, row, HAS_T)
    end = tl.minimum((chunk + 1) * CHUNK, vocab)
    high = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for start in range(chunk * CHUNK, end, BLOCK):
        high = tl.maximum(high, _scaled_block(row_ptr, t, start + offs, end, HAS_T))
    tl.store(max_ptr + row * num_chunks + chunk, tl.max(high, axis=0))


@triton.jit
def _chunk_sum_kernel(x_ptr, t_ptr, max_ptr, sum_ptr, vocab, num_chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                      CHUNKS: tl.constexpr, HAS_T: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    row_ptr, offs, t = x_ptr + row * vocab, tl.arange(0, BLOCK), _temperature(t_ptr, row, HAS_T)
    row_max = _row_max(max_ptr, row, num_chunks, CHUNKS)
    end = tl.minimum((chunk + 1) * CHUNK, vocab)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(chunk * CHUNK, end, BLOCK):
        idx = start + offs
        acc += tl.where(idx < end, tl.exp(_scaled_block(row_ptr, t, idx, end, HAS_T) - row_max), 0.0)
    tl.store(sum_ptr + row * num_chunks + chunk, tl.sum(acc, axis=0))


@triton.jit
def _row_lse_kernel(x_ptr, t_ptr, target_ptr, max_ptr, sum_ptr, lse_ptr, logp_ptr, vocab, num_chunks,
                    CHUNKS: tl.constexpr, HAS_T: tl.constexpr, HAS_TARGET: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    total = tl.load(sum_ptr + row * num_chunks)
    for chunk in range(1, num_chunks):  # left to right: an order no layout chooses
        total += tl.load(sum_ptr + row * num_chunks + chunk)
    lse = _row_max(max_ptr, row, num_chunks, CHUNKS) + tl.log(total)
    tl.store(lse_ptr + row, lse)
    if HAS_TARGET:
        target = tl.load(target_ptr + row)
        x_target = _scaled_block(x_ptr + row * vocab, _temperature(t_ptr, row, HAS_T), target, target + 1, HAS_T)
        tl.store(logp_ptr + row, x_target - lse)


@triton.jit
def _fast_chunk_kernel(x_ptr, t_ptr, m_ptr, s_ptr, vocab, num_chunks,
                       CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, chunk): the chunk's max and sum of exp(x - max), online (rescaled per step)."""
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    row_ptr = x_ptr + row * vocab
    t = tl.load(t_ptr + row)
    offs = tl.arange(0, BLOCK)
    high = float("-inf")
    total = 0.0
    for lo in range(chunk * CHUNK, tl.minimum((chunk + 1) * CHUNK, vocab), BLOCK):
        x = _scaled_block(row_ptr, t, lo + offs, vocab, True)
        new_high = tl.maximum(high, tl.max(x, axis=0))
        total = total * tl.exp(high - new_high) + tl.sum(tl.exp(x - new_high), axis=0)
        high = new_high
    tl.store(m_ptr + row * num_chunks + chunk, high)
    tl.store(s_ptr + row * num_chunks + chunk, total)


@triton.jit
def _fast_merge_kernel(x_ptr, t_ptr, target_ptr, m_ptr, s_ptr, logp_ptr, vocab, num_chunks, CHUNKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.arange(0, CHUNKS)
    mask = chunk < num_chunks
    high = tl.load(m_ptr + row * num_chunks + chunk, mask=mask, other=float("-inf"))
    total = tl.load(s_ptr + row * num_chunks + chunk, mask=mask, other=0.0)
    row_max = tl.max(high, axis=0)
    lse = row_max + tl.log(tl.sum(tl.where(mask, total * tl.exp(high - row_max), 0.0), axis=0))
    x_target = tl.math.div_rn(tl.load(x_ptr + row * vocab + tl.load(target_ptr + row)).to(tl.float32),
                              tl.load(t_ptr + row))
    tl.store(logp_ptr + row, x_target - lse)


def _check(logits, targets, temperatures):
    if logits.dim() != 2 or logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"logprob rows: logits [R, V] fp32/fp16/bf16, got {tuple(logits.shape)} {logits.dtype}")
    rows = logits.shape[0]
    for name, tensor in (("targets", targets), ("temperatures", temperatures)):
        if tensor is not None and tuple(tensor.shape) != (rows,):
            raise ValueError(f"logprob rows: {name} {tuple(tensor.shape)} for {rows} rows")
    return logits.contiguous()


def consistent_rows(logits, targets=None, temperatures=None, launch=None):
    """(lse [R] fp32, logp [R] fp32 or None) of logits [R, V] over temperatures [R] (None: the
    logits are already over their temperature); logp of targets [R] when given. `launch`
    (BLOCK, num_warps) replaces consistent_launch(V): only planted faults and controls pass it."""
    logits = _check(logits, targets, temperatures)
    rows, vocab = logits.shape
    lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
    logp = torch.empty(rows, dtype=torch.float32, device=logits.device) if targets is not None else None
    if rows and vocab:
        block, num_warps = launch or consistent_launch(vocab)
        num_chunks = triton.cdiv(vocab, CHUNK)
        maxima = torch.empty((rows, num_chunks), dtype=torch.float32, device=logits.device)
        sums = torch.empty_like(maxima)
        t = temperatures.to(logits.device, torch.float32).contiguous() if temperatures is not None else lse
        flags = dict(HAS_T=temperatures is not None)
        chunks = triton.next_power_of_2(num_chunks)
        _chunk_max_kernel[(rows, num_chunks)](logits, t, maxima, vocab, num_chunks, CHUNK=CHUNK, BLOCK=block,
                                              num_warps=num_warps, **flags)
        _chunk_sum_kernel[(rows, num_chunks)](logits, t, maxima, sums, vocab, num_chunks, CHUNK=CHUNK, BLOCK=block,
                                              CHUNKS=chunks, num_warps=num_warps, **flags)
        _row_lse_kernel[(rows,)](logits, t, targets if targets is not None else lse, maxima, sums, lse,
                                 logp if logp is not None else lse, vocab, num_chunks, CHUNKS=chunks,
                                 HAS_TARGET=targets is not None, num_warps=1, **flags)
    return lse, logp


def fast_rows(logits, targets, temperatures):
    """logp [R] fp32 of targets [R] under logits [R, V] over temperatures [R], in two launches."""
    logits = _check(logits, targets, temperatures)
    rows, vocab = logits.shape
    logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows and vocab:
        num_chunks = triton.cdiv(vocab, FAST_CHUNK)
        high = torch.empty((rows, num_chunks), dtype=torch.float32, device=logits.device)
        total = torch.empty_like(high)
        t = temperatures.to(logits.device, torch.float32).contiguous()
        _fast_chunk_kernel[(rows, num_chunks)](logits, t, high, total, vocab, num_chunks, CHUNK=FAST_CHUNK,
                                               BLOCK=FAST_BLOCK, num_warps=8)
        _fast_merge_kernel[(rows,)](logits, t, targets, high, total, logp, vocab, num_chunks,
                                    CHUNKS=triton.next_power_of_2(num_chunks), num_warps=1)
    return logp
