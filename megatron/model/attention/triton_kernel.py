"""A flash-attention kernel (Triton, forward and backward) whose score carries a per-distance table:

    s[i, j] = (q_i . k_j * scale) * weight[h, i - j] + bias[h, i - j],   j <= i (by index),
              i - j < window (when there is one), same packed document (when documents are masked)

and whose backward returns the tables' gradients, so a learnable distance table (KERPLE, T5, FIRE below its
threshold, ...) trains at the cost of plain flash attention: nothing [L, L] is ever written, only the row
log-sum-exp [b, H, L] between forward and backward, and per-tile partial sums of the tables' gradients
(linear in L).

The backward is three kernels over the same tiles, each recomputing P = exp(s - lse) from the forward's
log-sum-exp and dS = P * (dO.V^T - rowsum(dO * O)):
- `_dkdv`: one program per key block, looping over the query blocks that see it (dk, dv: no atomics);
- `_dq`: one program per query block, looping over its keys (dq);
- `_table_gradients`: one program per *block diagonal* t (the tiles whose query block is t blocks after
  their key block: all share the distances (t - 1) B + 1 .. (t + 1) B - 1), summing each tile's dS (and
  dS * q.k * scale for the weight) along its diagonals into 2 B registers, written once per program. The
  partials [b, H, T, 2 B] are folded into the tables' gradient afterwards in torch, in a fixed order: the
  sums are deterministic and no element is ever added atomically.
The diagonal sum of a tile is one gather (the tile skewed to [B, 2 B], row r shifted by r) and a column sum.

Why a program per block diagonal: a program that loops over a key block (or a query block) meets a new
block diagonal at every step, so its partial sums would span every distance (a [L / B, L] buffer, quadratic);
along a block diagonal every tile has the same distances. It recomputes P and dS once more per tile: two
matmuls and an exp beyond the seven matmuls of `_dkdv` and `_dq`, and only when a table needs a gradient (its
cost on a GPU is what tools/gpu_check's training part measures).

Written for this project from the FlashAttention-2 algorithm (online softmax forward, recomputing
backward); on CPU it runs under Triton's interpreter (TRITON_INTERPRET=1 before triton is imported) in
float32 and float64, which is how the tests prove it against the float64 reference.
"""
import torch
import triton
import triton.language as tl

from megatron.model.attention.sink import sink_gradient, with_sink


@triton.jit
def _visible_distances(offs_m, offs_n, length, window, docs_m, docs_n, HAS_WINDOW: tl.constexpr,
                       HAS_DOCS: tl.constexpr):
    """(bool [BM, BN] visible, int [BM, BN] i - j where visible, else 0)."""
    distance = offs_m[:, None] - offs_n[None, :]
    visible = (distance >= 0) & (offs_n[None, :] < length) & (offs_m[:, None] < length)
    if HAS_WINDOW:
        visible = visible & (distance < window)
    if HAS_DOCS:
        visible = visible & (docs_m[:, None] == docs_n[None, :])
    return visible, tl.where(visible, distance, 0)


@triton.jit
def _scores(q, k, distance, visible, bias_ptr, weight_ptr, scale, HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
            ACC: tl.constexpr, PRECISION: tl.constexpr):
    """(raw q.k * scale, the logits s with the tables' terms, -inf where not visible), both [BM, BN] in ACC."""
    raw = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale
    s = raw
    if HAS_WEIGHT:
        s = s * tl.load(weight_ptr + distance, mask=visible, other=0.0).to(ACC)
    if HAS_BIAS:
        s = s + tl.load(bias_ptr + distance, mask=visible, other=0.0).to(ACC)
    return raw, tl.where(visible, s, float("-inf"))


@triton.jit
def _forward(Q, K, V, O, LSE, BIAS, WEIGHT, DOCS, stride_b, stride_h, stride_l, stride_table, stride_docs,
             heads, length, head_dim, window, scale,
             HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DOCS: tl.constexpr, HAS_WINDOW: tl.constexpr,
             BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    block_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // heads, bh % heads
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h  # past 2^31 elements at long lengths
    offs_m = block_m * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok, dim_ok = offs_m < length, offs_d < head_dim
    q = tl.load(Q + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=row_ok[:, None] & dim_ok[None, :],
                other=0.0)
    docs_m = tl.load(DOCS + b * stride_docs + offs_m, mask=row_ok, other=-1) if HAS_DOCS else offs_m
    bias_ptr, weight_ptr = BIAS + h * stride_table, WEIGHT + h * stride_table
    running_max = tl.full([BLOCK], float("-inf"), dtype=ACC)
    total = tl.zeros([BLOCK], dtype=ACC)
    acc = tl.zeros([BLOCK, BLOCK_D], dtype=ACC)
    low = 0
    if HAS_WINDOW:  # the first key block any of these queries sees
        low = tl.maximum(block_m * BLOCK - window + 1, 0) // BLOCK * BLOCK
    high = tl.minimum((block_m + 1) * BLOCK, length)
    for start_n in range(low, high, BLOCK):
        offs_n = start_n + tl.arange(0, BLOCK)
        col_ok = offs_n < length
        kv_mask = col_ok[:, None] & dim_ok[None, :]
        k = tl.load(K + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        docs_n = tl.load(DOCS + b * stride_docs + offs_n, mask=col_ok, other=-2) if HAS_DOCS else offs_n
        visible, distance = _visible_distances(offs_m, offs_n, length, window, docs_m, docs_n, HAS_WINDOW, HAS_DOCS)
        _, s = _scores(q, k, distance, visible, bias_ptr, weight_ptr, scale, HAS_BIAS, HAS_WEIGHT, ACC, PRECISION)
        new_max = tl.maximum(running_max, tl.max(s, 1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)  # a padded row sees no key
        p = tl.exp(s - safe_max[:, None])
        rescale = tl.exp(running_max - safe_max)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
        running_max = new_max
    total = tl.where(total == 0.0, 1.0, total)
    out = acc / total[:, None]
    tl.store(O + base + offs_m[:, None] * stride_l + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])
    tl.store(LSE + bh.to(tl.int64) * length + offs_m, running_max + tl.log(total), mask=row_ok)


@triton.jit
def _tile_gradient(q, k, v, do, lse, delta, distance, visible, bias_ptr, weight_ptr, scale,
                   HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One tile's (P, dS of the logits, dS of q.k * scale, raw q.k * scale), [BM, BN] in ACC."""
    raw, s = _scores(q, k, distance, visible, bias_ptr, weight_ptr, scale, HAS_BIAS, HAS_WEIGHT, ACC, PRECISION)
    p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
    ds = p * (dp - delta[:, None])
    ds_raw = ds
    if HAS_WEIGHT:
        ds_raw = ds * tl.load(weight_ptr + distance, mask=visible, other=0.0).to(ACC)
    return p, ds, ds_raw, raw


@triton.jit
def _dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, BIAS, WEIGHT, DOCS, stride_b, stride_h, stride_l, stride_table,
          stride_docs, heads, length, head_dim, window, scale,
          HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DOCS: tl.constexpr, HAS_WINDOW: tl.constexpr,
          BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    block_n, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // heads, bh % heads
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h  # past 2^31 elements at long lengths
    offs_n = block_n * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    col_ok, dim_ok = offs_n < length, offs_d < head_dim
    kv_mask = col_ok[:, None] & dim_ok[None, :]
    k = tl.load(K + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
    docs_n = tl.load(DOCS + b * stride_docs + offs_n, mask=col_ok, other=-2) if HAS_DOCS else offs_n
    bias_ptr, weight_ptr = BIAS + h * stride_table, WEIGHT + h * stride_table
    dk = tl.zeros([BLOCK, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK, BLOCK_D], dtype=ACC)
    high = length
    if HAS_WINDOW:  # past the last query that sees any of these keys
        high = tl.minimum(block_n * BLOCK + BLOCK - 1 + window, length)
    for start_m in range(block_n * BLOCK, high, BLOCK):
        offs_m = start_m + tl.arange(0, BLOCK)
        row_ok = offs_m < length
        q_mask = row_ok[:, None] & dim_ok[None, :]
        q = tl.load(Q + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
        docs_m = tl.load(DOCS + b * stride_docs + offs_m, mask=row_ok, other=-1) if HAS_DOCS else offs_m
        visible, distance = _visible_distances(offs_m, offs_n, length, window, docs_m, docs_n, HAS_WINDOW, HAS_DOCS)
        p, _, ds_raw, _ = _tile_gradient(q, k, v, do, lse, delta, distance, visible, bias_ptr, weight_ptr, scale,
                                         HAS_BIAS, HAS_WEIGHT, ACC, PRECISION)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION, out_dtype=ACC)
        dk += tl.dot(tl.trans(ds_raw.to(q.dtype)), q, input_precision=PRECISION, out_dtype=ACC)
    out = base + offs_n[:, None] * stride_l + offs_d[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq(Q, K, V, DO, LSE, DELTA, DQ, BIAS, WEIGHT, DOCS, stride_b, stride_h, stride_l, stride_table, stride_docs,
        heads, length, head_dim, window, scale,
        HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DOCS: tl.constexpr, HAS_WINDOW: tl.constexpr,
        BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    block_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // heads, bh % heads
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h  # past 2^31 elements at long lengths
    offs_m = block_m * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok, dim_ok = offs_m < length, offs_d < head_dim
    q_mask = row_ok[:, None] & dim_ok[None, :]
    q = tl.load(Q + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
    docs_m = tl.load(DOCS + b * stride_docs + offs_m, mask=row_ok, other=-1) if HAS_DOCS else offs_m
    bias_ptr, weight_ptr = BIAS + h * stride_table, WEIGHT + h * stride_table
    dq = tl.zeros([BLOCK, BLOCK_D], dtype=ACC)
    low = 0
    if HAS_WINDOW:
        low = tl.maximum(block_m * BLOCK - window + 1, 0) // BLOCK * BLOCK
    high = tl.minimum((block_m + 1) * BLOCK, length)
    for start_n in range(low, high, BLOCK):
        offs_n = start_n + tl.arange(0, BLOCK)
        col_ok = offs_n < length
        kv_mask = col_ok[:, None] & dim_ok[None, :]
        k = tl.load(K + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        docs_n = tl.load(DOCS + b * stride_docs + offs_n, mask=col_ok, other=-2) if HAS_DOCS else offs_n
        visible, distance = _visible_distances(offs_m, offs_n, length, window, docs_m, docs_n, HAS_WINDOW, HAS_DOCS)
        _, _, ds_raw, _ = _tile_gradient(q, k, v, do, lse, delta, distance, visible, bias_ptr, weight_ptr, scale,
                                         HAS_BIAS, HAS_WEIGHT, ACC, PRECISION)
        dq += tl.dot(ds_raw.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
    tl.store(DQ + base + offs_m[:, None] * stride_l + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=q_mask)


@triton.jit
def _table_gradients(Q, K, V, DO, LSE, DELTA, BIAS, WEIGHT, DOCS, BIAS_PARTIAL, WEIGHT_PARTIAL, stride_b, stride_h,
                     stride_l, stride_table, stride_docs, heads, length, head_dim, window, scale, diagonals,
                     HAS_BIAS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DOCS: tl.constexpr,
                     HAS_WINDOW: tl.constexpr, BIAS_GRAD: tl.constexpr, WEIGHT_GRAD: tl.constexpr,
                     BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Program (t, b * H + h): the tiles (n + t, n) of one block diagonal; at [b, h, t, o] of the partials the
    sum of dS (dS * raw for the weight) over their entries with r - c = o - (BLOCK - 1), r, c the row and
    column inside the tile: distance t * BLOCK + o - (BLOCK - 1)."""
    t, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // heads, bh % heads
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h  # past 2^31 elements at long lengths
    offs_d = tl.arange(0, BLOCK_D)
    dim_ok = offs_d < head_dim
    bias_ptr, weight_ptr = BIAS + h * stride_table, WEIGHT + h * stride_table
    rows = tl.arange(0, BLOCK)[:, None]
    offsets = tl.arange(0, 2 * BLOCK)[None, :]
    column = rows - offsets + (BLOCK - 1)  # [BLOCK, 2 BLOCK]: the column of row r on diagonal o
    on_tile = (column >= 0) & (column < BLOCK)
    column = tl.where(on_tile, column, 0)
    bias_sums = tl.zeros([2 * BLOCK], dtype=ACC)
    weight_sums = tl.zeros([2 * BLOCK], dtype=ACC)
    blocks = tl.cdiv(length, BLOCK)
    for block_n in range(0, blocks - t):
        offs_m = (block_n + t) * BLOCK + tl.arange(0, BLOCK)
        offs_n = block_n * BLOCK + tl.arange(0, BLOCK)
        row_ok, col_ok = offs_m < length, offs_n < length
        q_mask, kv_mask = row_ok[:, None] & dim_ok[None, :], col_ok[:, None] & dim_ok[None, :]
        q = tl.load(Q + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + base + offs_m[:, None] * stride_l + offs_d[None, :], mask=q_mask, other=0.0)
        k = tl.load(K + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + offs_n[:, None] * stride_l + offs_d[None, :], mask=kv_mask, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + bh.to(tl.int64) * length + offs_m, mask=row_ok, other=0.0)
        docs_m = tl.load(DOCS + b * stride_docs + offs_m, mask=row_ok, other=-1) if HAS_DOCS else offs_m
        docs_n = tl.load(DOCS + b * stride_docs + offs_n, mask=col_ok, other=-2) if HAS_DOCS else offs_n
        visible, distance = _visible_distances(offs_m, offs_n, length, window, docs_m, docs_n, HAS_WINDOW, HAS_DOCS)
        _, ds, _, raw = _tile_gradient(q, k, v, do, lse, delta, distance, visible, bias_ptr, weight_ptr, scale,
                                       HAS_BIAS, HAS_WEIGHT, ACC, PRECISION)
        if BIAS_GRAD:  # the tile skewed: row r shifted right by r, so each diagonal is one column
            bias_sums += tl.sum(tl.where(on_tile, tl.gather(ds, column, 1), 0.0), 0)
        if WEIGHT_GRAD:
            weight_sums += tl.sum(tl.where(on_tile, tl.gather(ds * raw, column, 1), 0.0), 0)
    out = bh * diagonals * 2 * BLOCK + t * 2 * BLOCK + tl.arange(0, 2 * BLOCK)
    if BIAS_GRAD:
        tl.store(BIAS_PARTIAL + out, bias_sums)
    if WEIGHT_GRAD:
        tl.store(WEIGHT_PARTIAL + out, weight_sums)


def fold_partials(partials: torch.Tensor, block: int, span: int) -> torch.Tensor:
    """Per-diagonal partial sums [b, H, T, 2 block] -> the table's gradient [H, span], summed in a fixed order:
    entry o of diagonal t is distance t * block + o - (block - 1), so the first half of diagonal t and the
    second half of diagonal t - 1 cover distances (t - 1) block + 1 .. t block."""
    summed = partials.sum(0)  # [H, T, 2 block]
    heads, diagonals = summed.shape[:2]
    segments = summed.new_zeros(heads, diagonals + 1, block)
    segments[:, :diagonals] += summed[..., :block]
    segments[:, 1:] += summed[..., block:]
    by_distance = segments.flatten(1)[:, block - 1:]  # distance 0 first
    if by_distance.shape[1] >= span:
        return by_distance[:, :span]
    return torch.cat([by_distance, by_distance.new_zeros(heads, span - by_distance.shape[1])], dim=1)


def launch_shape(q: torch.Tensor) -> dict:
    """Tile sizes and arithmetic for q's device and dtype: 16 (tl.dot's smallest tile) under the interpreter,
    on a GPU 64 up to 64 head dimensions and 32 above (a program holds four [block, D] tiles and an fp32
    accumulator in registers; not tuned: the GPU check times D = 64); the head dimension padded to a power of
    two of at least 16; float64 accumulates in float64, everything else in float32; float32 inputs multiply in
    full float32 ('ieee'), not TF32."""
    block = 16 if q.device.type == "cpu" else (64 if q.shape[-1] <= 64 else 32)
    return {"BLOCK": block, "BLOCK_D": max(16, triton.next_power_of_2(q.shape[-1])),
            "ACC": tl.float64 if q.dtype == torch.float64 else tl.float32,
            "PRECISION": "ieee" if q.dtype in (torch.float32, torch.float64) else "tf32"}


def common_arguments(q, bias_table, weight_table, documents, window):
    """The pointer and size arguments every kernel takes after its tensors (tables and documents may be None:
    a dummy stands in, never read)."""
    batch, heads, length, head_dim = q.shape
    if bias_table is not None and weight_table is not None and bias_table.shape != weight_table.shape:
        raise ValueError(f"the bias and weight tables differ in shape: {tuple(bias_table.shape)} and "
                         f"{tuple(weight_table.shape)}; a method's distance_tables gives both [H, span].")
    dummy = q.new_zeros(1)
    bias = bias_table.contiguous() if bias_table is not None else dummy  # rows of stride 1 (T5's, FIRE's are views)
    weight = weight_table.contiguous() if weight_table is not None else dummy
    table = bias if bias_table is not None else weight
    docs = documents.contiguous() if documents is not None else torch.zeros(1, dtype=torch.long, device=q.device)
    return (bias, weight, docs), (q.stride(0), q.stride(1), q.stride(2), table.stride(0),
                                  0 if documents is None else docs.stride(0), heads, length, head_dim,
                                  0 if window is None else window, head_dim ** -0.5), \
        {"HAS_BIAS": bias_table is not None, "HAS_WEIGHT": weight_table is not None, "HAS_DOCS": documents is not None,
         "HAS_WINDOW": window is not None, **launch_shape(q)}


class DistanceTableFlashAttention(torch.autograd.Function):
    """softmax over visible keys of (q.k / sqrt(D)) * weight[h, i - j] + bias[h, i - j], times v; q, k, v
    [b, H, L, D] contiguous, tables [H, >= L] or None, documents [b, L] or None, window int or None, sink: the
    layer's sink logits [H] or None (sink.py: (O, lse) adjusted after the forward kernel, the backward kernels
    run from (O', lse'))."""

    @staticmethod
    def forward(ctx, q, k, v, bias_table, weight_table, documents, window, sink):
        (bias, weight, docs), sizes, flags = common_arguments(q, bias_table, weight_table, documents, window)
        batch, heads, length, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(batch, heads, length, dtype=torch.promote_types(q.dtype, torch.float32), device=q.device)
        grid = (triton.cdiv(length, flags["BLOCK"]), batch * heads)
        _forward[grid](q, k, v, out, lse, bias, weight, docs, *sizes, **flags)
        if sink is not None:
            out, lse = with_sink(out, lse, sink)
        ctx.save_for_backward(q, k, v, out, lse, bias_table, weight_table, documents, sink)
        ctx.window = window
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, bias_table, weight_table, documents, sink = ctx.saved_tensors
        window = ctx.window
        grad_out = grad_out.contiguous()
        (bias, weight, docs), sizes, flags = common_arguments(q, bias_table, weight_table, documents, window)
        batch, heads, length, _ = q.shape
        block = flags["BLOCK"]
        delta = (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(-1)  # rowsum(dO * O) [b, H, L]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        blocks = triton.cdiv(length, block)
        _dkdv[(blocks, batch * heads)](q, k, v, grad_out, lse, delta, dk, dv, bias, weight, docs, *sizes, **flags)
        _dq[(blocks, batch * heads)](q, k, v, grad_out, lse, delta, dq, bias, weight, docs, *sizes, **flags)
        bias_grad = bias_table is not None and ctx.needs_input_grad[3]
        weight_grad = weight_table is not None and ctx.needs_input_grad[4]
        grad_bias = grad_weight = None
        if bias_grad or weight_grad:
            # Block diagonals with a visible pair: all, or those within the window (distance >= (t - 1) B + 1).
            diagonals = blocks if window is None else min(blocks, (window + block - 2) // block + 1)
            partial = torch.zeros(batch, heads, diagonals, 2 * block, dtype=lse.dtype, device=q.device)
            weight_partial = torch.zeros_like(partial) if weight_grad else partial
            _table_gradients[(diagonals, batch * heads)](
                q, k, v, grad_out, lse, delta, bias, weight, docs, partial, weight_partial, *sizes, diagonals,
                BIAS_GRAD=bias_grad, WEIGHT_GRAD=weight_grad, **flags)
            if bias_grad:
                grad_bias = fold_partials(partial, block, bias_table.shape[1]).to(bias_table.dtype)
            if weight_grad:
                grad_weight = fold_partials(weight_partial, block, weight_table.shape[1]).to(weight_table.dtype)
        grad_sink = None if sink is None else sink_gradient(sink, lse, grad_out, out)
        return dq, dk, dv, grad_bias, grad_weight, None, None, grad_sink


def interpreted() -> bool:
    """These kernels were made by Triton's interpreter (TRITON_INTERPRET was on when this module was imported)."""
    return type(_forward).__name__ == "InterpretedFunction"


def flash_attention_with_distance_tables(q, k, v, bias_table=None, weight_table=None, documents=None, window=None,
                                         sink=None):
    """[b, H, L, D] -> [b, H, L, D]: the kernel's attention (DistanceTableFlashAttention), the tables in q's
    precision or wider as given."""
    if interpreted() != (q.device.type == "cpu"):
        raise RuntimeError(
            f"the Triton attention kernel was loaded {'for' if interpreted() else 'without'} Triton's interpreter "
            f"(TRITON_INTERPRET {'on' if interpreted() else 'off'} when it was first imported in this process), and "
            f"this forward's tensors are on {q.device.type}: the interpreter runs CPU tensors, compiled kernels CUDA "
            "ones. Start a new process with TRITON_INTERPRET=1 for the CPU, or without it for CUDA.")
    return DistanceTableFlashAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), bias_table,
                                             weight_table, documents, window, sink)
