"""Which attention path a forward takes: `attention-impl`, resolved. `auto`'s rule and the memory
estimate it reads live here, apart from the paths themselves (attention.py)."""
import torch

from megatron.model.attention_config import ATTENTION_IMPLS
from megatron.neox_arguments import NeoXArgsError


def flex_can_run(device_type: str, needs_grad: bool, dropout_p: float) -> str | None:
    """Why FlexAttention cannot run here, or None when it can."""
    if device_type == "cpu" and needs_grad:
        return "torch's FlexAttention has no backward pass on CPU"
    if dropout_p > 0:
        return "FlexAttention does not apply attention dropout"
    return None


CPU_MEMORY_BUDGET_MB = 1024
CUDA_MEMORY_FRACTION = 4  # a quarter of the device


def memory_budget_bytes(device: torch.device, budget_mb: int | None) -> int:
    """What `auto` lets the `sdpa` path materialise (sdpa_bytes): `attention-memory-budget` MB, else
    a quarter of a CUDA device's total memory, or 1 GiB on CPU.

    Total, not free, memory: free memory moves with the caching allocator from step to step, and
    the path (FlexAttention compiles per path and length) should not. On CPU a fixed size, small
    next to the RAM of any machine that trains here; there it only decides for the methods that
    `auto` does not send to `blocked` anyway (fire; a weight, with gradients; attention dropout).
    FIRE at 8 heads in fp32, for example, stays on `sdpa` (about 2x faster than its blocks) up to
    L = 1636 in evaluation."""
    if budget_mb is not None:
        return budget_mb * 2**20
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // CUDA_MEMORY_FRACTION
    return CPU_MEMORY_BUDGET_MB * 2**20


def sdpa_bytes(*, length: int, heads: int, batch: int, element_size: int, pairwise_bytes: int,
               writes_scores: bool, needs_grad: bool) -> int:
    """Bytes the `sdpa` path materialises for one forward at `length` tokens, counted from what
    plan_attention and attend allocate (per layer: what each layer keeps for its backward is counted
    once). With e = `element_size` of the compute dtype, per (query, key) pair:

    - e H for the mask [1, H, L, L] (H = 1 for a window without terms), held through the forward and
      the backward and shared by the layers. A distance-only method builds nothing else
      (distance_mask; position_ids that are not consecutive gather, about twice that);
    - for a method whose terms `pe.pairwise` builds (one that depends on i itself, or has a weight):
      its `pairwise_bytes`, 17 for the visibility [L, L] (bool, and a window's int64 position
      differences) and e H for the copy the mask is masked from;
    - for the written-out softmax (`writes_scores`: a weight, or a mask that needs a gradient, which
      sends SDPA to its math kernel), the [b, H, L, L] scores in fp32 or wider: two at once without
      gradients (one op's input and output), three with (scores and probabilities kept for the
      backward, one being made)."""
    per_pair = element_size * heads
    if pairwise_bytes:
        per_pair += pairwise_bytes + 17 + element_size * heads
    if writes_scores:
        per_pair += batch * heads * max(element_size, 4) * (3 if needs_grad else 2)
    return length * length * per_pair


def choose_path(impl: str, *, distance_only: bool, has_score_terms: bool, windowed: bool, device_type: str,
                needs_grad: bool, dropout_p: float, has_weight: bool, sdpa_estimate: int, budget: int) -> str:
    """Resolve `attention_impl`; `auto` never returns a path that cannot run here.

    `auto` takes the fastest path whose memory fits, from measurements on CPU (README, Performance):
    - without terms or a window, `sdpa`: fused causal kernels, no L x L tensor;
    - on CPU, a distance-only method without dropout: `blocked`, which there materialises nothing
      (attend_toeplitz) and was the fastest path at every length measured, with gradients or not;
      for a method with a weight only without gradients, where its blocks skip the future keys that
      `sdpa`'s written-out softmax computes (half the time at L = 1024 and 2048; with gradients,
      blocks recomputed in the backward, `sdpa` took 0.7x their time at L = 512);
    - otherwise `sdpa` while `sdpa_estimate` (sdpa_bytes) fits in `budget` (memory_budget_bytes),
      then `flex` on CUDA where it can run (no L x L tensor at all), else `blocked`.
    Never `flex` on CPU: compiling it costs about 7 s per new length, more than the work;
    `attention-impl: flex` still runs it there. The inputs depend on the length, heads, batch,
    dtype, device and method, never on a layer, so one forward takes one path."""
    if impl not in ATTENTION_IMPLS:
        raise NeoXArgsError(f"attention-impl is {impl!r}; choose one of {', '.join(ATTENTION_IMPLS)}.")
    flex_problem = flex_can_run(device_type, needs_grad, dropout_p)
    if impl == "flex":
        if not distance_only:
            raise NeoXArgsError(
                "attention-impl is 'flex', but this positional method's bias depends on the query "
                "position itself, not only on the distance i - j, so it has no per-distance table for "
                "FlexAttention to read. Set attention-impl to 'blocked', 'sdpa' or 'auto'.")
        if flex_problem:
            raise NeoXArgsError(
                f"attention-impl is 'flex', but {flex_problem} (device {device_type}, gradients "
                f"{'needed' if needs_grad else 'not needed'}, attention-dropout {dropout_p}). Set "
                "attention-impl to 'blocked' or 'auto' for this run, or run on a CUDA device.")
    if impl != "auto":
        return impl
    if not (has_score_terms or windowed):
        return "sdpa"
    if device_type == "cpu" and distance_only and dropout_p == 0 and not (has_weight and needs_grad):
        return "blocked"
    if sdpa_estimate <= budget:
        return "sdpa"
    if distance_only and flex_problem is None and device_type != "cpu":
        return "flex"
    return "blocked"
