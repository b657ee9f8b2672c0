"""PaTH's dot products (pe.key_transforms): q_i^T H_i H_{i-1} ... H_{j+1} k_j with H_t = I - beta_t w_t w_t^T,
written out for a block of queries against every earlier key, walking the keys a chunk at a time from the
last to the first (transformed_dot_products says how): L / CHUNK steps of O(b H q C (C + D)) each, no D x D
matrix and no [q, k, D] tensor (autograd keeps each step's state for the backward: O(q L), which the
blocked path recomputes per block). fla's chunked kernels (fla/ops/path_attn) use the same compact form
on CUDA; this is the plain form every CPU path here shares."""
import torch

CHUNK = 32  # keys per step. fp32 against float64, 4 heads of 64 dims, L = 512: random w and beta in (0, 2)
# 1.3e-5 (the one-key-at-a-time walk 1.1e-5; chunks of 64 1.6e-5); the hardest case, w nearly or exactly
# repeated with beta near 2, 3e-4 to 9e-4 (the walk 4e-5 to 7e-5; 64: 9e-4 to 4.5e-3). One thread, fwd + bwd
# at the grid's training shape (b 16, 4 heads of 32, L = 64): 17 ms, 23 ms with 64, the walk 160 ms.


def transformed_dot_products(q, k, w, beta, q_start: int, chunk: int = CHUNK):
    """q [b, H, n, D]: queries q_start .. q_start + n - 1; k, w [b, H, m, D], beta [b, H, m]: keys 0 .. m - 1
    -> [b, H, n, m]: q_i^T H_i ... H_{j+1} k_j for j <= i (later keys: a value the causal mask removes).

    The keys are walked a chunk of C at a time, from the last chunk to the first; each query carries
    u_i^T = q_i^T H_i ... H_e into the chunk [a, e) it meets next. Within a chunk the product of any run of
    its transforms is one compact form (Schreiber & Van Loan's WY representation, the "UT transform" of
    fla's chunked kernels): H_s ... H_{t'} = I - sum_{s >= r >= t >= t'} T_rt w_r w_t^T over the chunk's
    tokens, with T = (I + diag(beta) strict_lower(W W^T))^-1 diag(beta) lower triangular [C, C]; a run is a
    principal block of T because T is triangular. So for key j of the chunk,
        score(i, j) = u_i.k_j - sum_{r <= i} sum_{t > j} (u_i.w_r) T_rt (w_t.k_j),
    three [n, C] x [C, C] products, and u_i takes the whole chunk's product (its runs up to i) on to the
    chunk before. m / C Python steps instead of m; the same numbers as the walk one key at a time
    (reference.py) and as the D x D products multiplied out (tests/model/positional/test_path.py) to
    rounding, float64 ~1e-14. T is solved in at least float32, whose error grows with C (CHUNK's note; fla
    chunks by 64 in float32)."""
    n, m = q.shape[2], k.shape[2]
    w, beta = w.to(q.dtype), beta.to(q.dtype)
    solve_dtype = torch.promote_types(q.dtype, torch.float32)
    rows = torch.arange(q_start, q_start + n, device=q.device)[:, None]  # [n, 1]: each query's index
    state, columns = q, []
    for a in range(((m - 1) // chunk) * chunk, -1, -chunk):
        e = min(a + chunk, m)
        w_c, k_c, beta_c = w[:, :, a:e], k[:, :, a:e], beta[:, :, a:e]
        gram = (w_c @ w_c.transpose(-1, -2)).to(solve_dtype).tril(-1) * beta_c.to(solve_dtype)[..., :, None]
        eye = torch.eye(e - a, dtype=solve_dtype, device=q.device)
        T = torch.linalg.solve_triangular(eye + gram, torch.diag_embed(beta_c.to(solve_dtype)), upper=False,
                                          unitriangular=True).to(q.dtype)  # [b, H, C, C]
        reach = (state @ w_c.transpose(-1, -2)) * (torch.arange(a, e, device=q.device) <= rows)  # u_i.w_r, r <= i
        through = reach @ T  # [b, H, n, C]: sum_r (u_i.w_r) T_rt
        columns.append(state @ k_c.transpose(-1, -2) - through @ (w_c @ k_c.transpose(-1, -2)).tril(-1))
        if a > 0:
            state = state - through @ w_c
    return torch.cat(columns[::-1], dim=-1)
