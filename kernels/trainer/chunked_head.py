"""The trainer's head in row chunks: lm_head and the log-probs, with no [tokens, V] logits saved.

Forward: the contract's lm_head and logprob on chunks of `chunk_rows` rows, saving only the hidden
rows and the weight. Backward recomputes each chunk's logits through the same door (the forward's
own chunks), takes d logits from the log-prob op's own autograd (in the logits' dtype), then
dH = dlogits @ W in row tiles of `fold_rows` (one GEMM shape) and dW = the sum over tiles of
dlogits_t^T @ H_t in fp32, in tile order. Any chunk size that is a multiple of the fold tile adds
the same tiles in the same order: the gradient bits follow `fold_rows`, never the chunk size.
"""
import torch

from kernels.ops.linear.consistent import in_row_tiles
from kernels.ops.padding import pad_to_multiple

FOLD_ROWS = 64  # the trainer's default fold tile (its numerics: a change moves gradient bits)


def check_chunking(chunk_rows, fold_rows: int) -> None:
    if not isinstance(fold_rows, int) or fold_rows <= 0:
        raise ValueError(f"head_fold_rows: must be a positive integer, got {fold_rows!r}")
    if chunk_rows is not None and (not isinstance(chunk_rows, int) or chunk_rows <= 0 or chunk_rows % fold_rows):
        raise ValueError(f"head_chunk_rows: must be a positive multiple of head_fold_rows ({fold_rows}), "
                         f"got {chunk_rows!r}")


def head_logprobs(hidden, weight, targets, temperatures, dispatch, case, rows, *, chunk_rows=None,
                  fold_rows=FOLD_ROWS):
    """[R] fp32 log-probs of `targets` under lm_head(hidden); `rows` [R] names the forward's
    batch rows to the door's observers. chunk_rows None: one chunk of every row."""
    check_chunking(chunk_rows, fold_rows)
    return _ChunkedHead.apply(hidden, weight, targets, temperatures, dispatch, case, rows,
                              chunk_rows or max(1, hidden.shape[0]), fold_rows)


class _ChunkedHead(torch.autograd.Function):

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperatures, dispatch, case, rows, chunk_rows, fold_rows):
        parts = []
        for lo in range(0, hidden.shape[0], chunk_rows):
            part = slice(lo, lo + chunk_rows)
            with dispatch.selecting_rows(rows[part]):
                logits = dispatch("lm_head", case, None, hidden[part], weight)
                parts.append(dispatch("logprob", case, None, logits, targets[part], temperatures[part]))
        ctx.save_for_backward(hidden, weight, targets, temperatures)
        ctx.dispatch, ctx.case, ctx.rows = dispatch, case, rows
        ctx.chunk_rows, ctx.fold_rows = chunk_rows, fold_rows
        return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, targets, temperatures = ctx.saved_tensors
        dispatch, case = ctx.dispatch, ctx.case
        wide = torch.promote_types(weight.dtype, torch.float32)  # fp32, or a float64 reference's own
        fold, weight_wide = ctx.fold_rows, weight.to(wide)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=wide, device=weight.device)
        for lo in range(0, hidden.shape[0], ctx.chunk_rows):
            part = slice(lo, lo + ctx.chunk_rows)
            with dispatch.selecting_rows(ctx.rows[part]):
                with torch.no_grad():
                    logits = dispatch("lm_head", case, None, hidden[part], weight).detach().requires_grad_()
                with torch.enable_grad():
                    logprobs = dispatch("logprob", case, None, logits, targets[part], temperatures[part])
                    (d_logits,) = torch.autograd.grad(logprobs, logits, grad[part])
            d_logits = d_logits.to(wide)
            grad_hidden[part] = in_row_tiles(lambda tile: tile @ weight_wide, d_logits, dim=0,
                                             tile_rows=fold).to(hidden.dtype)
            chunk_hidden = hidden[part]
            for start in range(0, d_logits.shape[0], fold):  # the fold: tiles in order, fp32
                tile_grad = pad_to_multiple(d_logits[start:start + fold], 0, fold)
                tile_hidden = pad_to_multiple(chunk_hidden[start:start + fold].to(wide), 0, fold)
                grad_weight += tile_grad.transpose(0, 1) @ tile_hidden
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None, None, None, None
