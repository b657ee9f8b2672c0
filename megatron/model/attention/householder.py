"""PaTH's dot products (pe.key_transforms): q_i^T H_i H_{i-1} ... H_{j+1} k_j with H_t = I - beta_t w_t w_t^T,
written out for a block of queries against every earlier key. Walking the keys from the last to the first,
each query carries q_i^T H_i ... H_{j+1} and takes one more H at every step (a rank-one update): L steps of
O(b H q D) each, no D x D matrix and no [q, k, D] tensor in the forward (autograd keeps each step's state
for the backward: O(q L D), which the blocked path recomputes per block). fla's chunked UT transform
(fla/ops/path_attn) computes the same numbers faster; this is the plain form every path here shares."""
import torch


def transformed_dot_products(q, k, w, beta, q_start: int):
    """q [b, H, n, D]: queries q_start .. q_start + n - 1; k, w [b, H, m, D], beta [b, H, m]: keys 0 .. m - 1
    -> [b, H, n, m]: q_i^T H_i ... H_{j+1} k_j for j <= i (later keys: a value the causal mask removes)."""
    n, m = q.shape[2], k.shape[2]
    w, beta = w.to(q.dtype), beta.to(q.dtype)
    rows = torch.arange(q_start, q_start + n, device=q.device)[:, None]  # [n, 1]: each query's index
    state, columns = q, [None] * m
    for j in range(m - 1, -1, -1):
        columns[j] = state @ k[:, :, j, :, None]  # [b, H, n, 1]
        if j > 0:  # H_j acts on the queries at or after it, before they meet key j - 1
            reach = (state @ w[:, :, j, :, None]) * beta[:, :, j, None, None] * (rows >= j)
            state = state - reach * w[:, :, j, None, :]
    return torch.cat(columns, dim=-1)


def dot_products_for(transforms, q_start: int, keys: int):
    """transformed_dot_products with a layer's transforms (w, beta over the sequence) bound, for
    masks.attend_materialised; None without transforms."""
    if transforms is None:
        return None
    w, beta = transforms
    return lambda q, k: transformed_dot_products(q, k, w[:, :, :keys], beta[:, :, :keys], q_start)
