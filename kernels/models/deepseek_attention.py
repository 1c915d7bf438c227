"""DeepSeek-V4's attention half, one definition for every phase: low-rank q, one K = V head, both
rotated (interleaved, trailing rope_head_dim); a compressed layer's compressor closes windows of
its rows into blocks at absolute positions (state carried across calls) and CSA's indexer picks each
query's Top-K blocks; every query attends over its sliding window then its compressed entries, laid
out at one length the config fixes, with a per-head sink; the value's rotation undone on the output;
the grouped low-rank output projection. The dense projections run in the config's dense_quant
format (FP8: W8A8, 128x128 weight blocks and 1x128 activations, each a region of its own).
"""
import torch


def project(dispatch, case, index, region, x, weight, fmt):
    """A dense projection: the weight, then the activations, in `fmt` (none: as they are)."""
    weight = dispatch("weight_quant", case, index, weight, fmt=fmt)
    return dispatch(region, case, index, dispatch("act_quant", case, index, x, fmt=fmt), weight)


def _rope(dispatch, case, index, x, positions, config, theta, inverse=False):
    return dispatch("rope_interleaved", case, index, x, positions, theta=theta, max_position=config.max_position,
                    rope_dim=config.rope_head_dim, inverse=inverse)


def _close_windows(dispatch, segment, index, store, state, which, kv, gate, module, *, config, rate, overlap):
    """A segment's new rows into its sequence's windows (`which`: the compressor's or the indexer's
    state); the blocks they close, normed and rotated at their first positions, kept in the state
    as the store keeps KV (with an FP8 cache: E4M3 codes in the engine, their round trip in the
    trainer), the indexer's keys too, as vLLM caches them."""
    window = getattr(state, which)
    blocks, after = dispatch("window_compress", segment.case, index, kv, gate, module.position_bias, window,
                             rate=rate, overlap=overlap)
    setattr(state, which, after)
    blocks = blocks.to(kv.dtype)
    if blocks.shape[0]:
        blocks, _ = dispatch("compress_norm", segment.case, index, blocks, module.kv_norm, eps=config.rms_norm_eps)
        starts = (torch.arange(blocks.shape[0], device=kv.device) + window.emitted) * rate
        blocks = dispatch("compress_rope", segment.case, index, blocks[:, None], starts,
                          theta=config.compress_rope_theta, max_position=config.max_position,
                          rope_dim=config.rope_head_dim)[:, 0]
    (state.blocks if which == "compressor" else state.index_keys).append(store.kept(segment, blocks))


class _CudaGather(torch.autograd.Function):
    """rows.index_select(0, flat_ids) on CUDA, its backward a sorted accumulation: index_put_
    with accumulate sorts the ids (stably) and adds each row's gradients one after another in
    index order, where index_select's own backward (index_add_) adds them with atomics."""

    @staticmethod
    def forward(ctx, rows, flat_ids):
        ctx.save_for_backward(flat_ids)
        ctx.num_rows = rows.shape[0]
        return rows.index_select(0, flat_ids)

    @staticmethod
    def backward(ctx, grad):
        (flat_ids,) = ctx.saved_tensors
        grad_rows = grad.new_zeros((ctx.num_rows, *grad.shape[1:]))
        return grad_rows.index_put_((flat_ids,), grad, accumulate=True), None


def _gathered(rows, ids):
    """rows[ids], each row's gradients added in index order by its backward whatever the timing:
    on CPU index_select's own (advanced indexing's adds them with atomics on CPU threads), on
    CUDA _CudaGather's sorted accumulation (index_select's adds them with atomics there)."""
    flat = ids.reshape(-1)
    if rows.device.type == "cuda" and torch.is_grad_enabled() and rows.requires_grad:
        return _CudaGather.apply(rows, flat).reshape(*ids.shape, rows.shape[-1])
    return rows.index_select(0, flat).reshape(*ids.shape, rows.shape[-1])


def _entries(keys, blocks, positions, chosen, config, kind, rate):
    """([T, L, D] entries, [T, L] valid) of each query: its window (positions p-W+1..p), then its
    compressed blocks (CSA: the chosen ones in their order; HCA: block s at slot s while s is visible)."""
    window = torch.arange(-config.sliding_window + 1, 1, device=positions.device)
    at = positions[:, None] + window[None, :]  # [T, W]
    valid = at >= 0
    entries = _gathered(keys, at.clamp(min=0))
    extra = config.compressed_entries(kind)
    if extra:
        if kind == "csa":
            ids, seen = chosen, chosen >= 0
        else:
            ids = torch.arange(extra, device=positions.device)[None, :].expand(positions.shape[0], -1)
            seen = ids < ((positions + 1) // rate)[:, None]
        ids = ids.clamp(min=0, max=max(blocks.shape[0] - 1, 0))
        taken = _gathered(blocks, ids) if blocks.shape[0] else keys.new_zeros(*ids.shape, keys.shape[-1])
        entries, valid = torch.cat([entries, taken], dim=1), torch.cat([valid, seen], dim=1)
    return entries, valid


def attention(model, dispatch, batch, index, layer, x, cache):
    """The attention block on x [M, hidden] (normed): [M, hidden]."""
    c, case, rows, kind = model.config, batch.case, x.shape[0], model.config.attention_kinds[index]
    theta = c.rope_theta if kind == "sliding" else c.compress_rope_theta
    positions = batch.positions
    fmt = c.dense_quant
    q_res, _ = dispatch("norm", case, index, project(dispatch, case, index, "q_a_proj", x, layer.q_a_proj, fmt),
                        layer.q_a_norm, eps=c.rms_norm_eps)
    q = project(dispatch, case, index, "q_b_proj", q_res, layer.q_b_proj, fmt).reshape(rows, c.num_heads, c.head_dim)
    q, _ = dispatch("qk_norm", case, index, q, layer.q_b_norm, eps=c.rms_norm_eps)  # per head, unweighted
    q = _rope(dispatch, case, index, q, positions, c, theta)
    kv, _ = dispatch("norm", case, index, project(dispatch, case, index, "kv_proj", x, layer.kv_proj, fmt),
                     layer.kv_norm, eps=c.rms_norm_eps)
    kv = _rope(dispatch, case, index, kv[:, None], positions, c, theta)[:, 0]
    extra = {}
    if kind != "sliding":
        comp = layer.compressor
        extra["kv"], extra["gate"] = (project(dispatch, case, index, "compress_proj", x, w, fmt)
                                      for w in (comp.kv_proj, comp.gate_proj))
    if kind == "csa":
        idx = layer.indexer
        extra["ikv"], extra["igate"] = (dispatch("index_proj", case, index, x, w) for w in (idx.kv_proj, idx.gate_proj))
        iq = dispatch("index_proj", case, index, q_res, idx.q_b_proj).reshape(rows, c.index_heads, c.index_head_dim)
        extra["iq"] = _rope(dispatch, case, index, iq, positions, c, c.compress_rope_theta)
        extra["iw"] = dispatch("index_proj", case, index, x, idx.weights_proj).float() * c.index_heads ** -0.5
    store = cache.compressed(index)
    rate = c.compress_rate(kind) if kind != "sliding" else 0
    out = q.new_empty(rows, c.num_heads, c.head_dim)
    for segment in batch.segments:
        state = store.open(segment)
        state.keys.append(store.kept(segment, kv[segment.rows]))
        rows_of = {name: t[segment.rows] for name, t in extra.items()}
        with dispatch.for_segment(segment):  # these calls see this sequence alone
            if kind != "sliding":
                _close_windows(dispatch, segment, index, store, state, "compressor", rows_of["kv"], rows_of["gate"],
                               layer.compressor, config=c, rate=rate, overlap=kind == "csa")
            if kind == "csa":
                _close_windows(dispatch, segment, index, store, state, "indexer", rows_of["ikv"], rows_of["igate"],
                               layer.indexer, config=c, rate=rate, overlap=True)
            out[segment.rows] = _attend(dispatch, segment, index, layer, store, state, c, kind, rate, q[segment.rows],
                                        positions[segment.rows], rows_of)
    out = _rope(dispatch, case, index, out, positions, c, theta, inverse=True)
    grouped = out.reshape(rows, c.o_groups, -1)
    width, o_a = c.o_lora_rank, dispatch("weight_quant", case, index, layer.o_a_proj, fmt=fmt)  # one block grid
    mixed = torch.cat([dispatch("o_a_proj", case, index, dispatch("act_quant", case, index, grouped[:, g], fmt=fmt),
                                o_a[g * width:(g + 1) * width]) for g in range(c.o_groups)], dim=-1)
    return project(dispatch, case, index, "o_b_proj", mixed, layer.o_b_proj, fmt)


def _attend(dispatch, segment, index, layer, store, state, c, kind, rate, q, positions, extra):
    """One segment's attention output [n, H, D] over its sequence's keys and blocks (read into one
    workspace whatever the store keeps)."""
    case, chosen = segment.case, None
    keys = store.read(state.keys, q.dtype)
    blocks = store.read(state.blocks, q.dtype) if state.blocks else keys.new_zeros(0, c.head_dim)
    if kind == "csa":
        scores = dispatch("block_score", case, index, extra["iq"], store.read(state.index_keys, extra["iq"].dtype),
                          extra["iw"], scale=c.index_head_dim ** -0.5)
        chosen = dispatch("block_topk", case, index, scores, positions, top_k=c.index_topk, compress_rate=rate)
    entries, valid = _entries(keys, blocks, positions, chosen, c, kind, rate)
    return dispatch("sink_attention", case, index, q, entries, valid, layer.sinks, scale=c.head_dim ** -0.5)
