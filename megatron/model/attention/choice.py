"""Which attention strategy a forward takes: `attention-impl`, resolved. `auto`'s rule and the memory
budget it reads live here, apart from the strategies themselves (megatron/model/attention/), each of
which says whether it can run (`can_run`) and what it allocates (`memory_bytes`)."""
import warnings

import torch

from megatron.model.attention.inputs import AttentionInputs
from megatron.model.attention.registry import PATH_STRATEGIES, STRATEGIES, strategy_for
from megatron.model.attention.sdpa import sdpa_bytes  # noqa: F401 (tools/gpu_check reads it here)
from megatron.model.attention.config import ATTENTION_IMPLS
from megatron.errors import NeoXArgsError

CPU_MEMORY_BUDGET_MB = 1024
# `auto` trains a learnable distance table on CUDA with the `triton` kernel (auto_preferences).
TRITON_FOR_LEARNABLE_TABLES_ON_CUDA = True
CUDA_MEMORY_FRACTION = 4  # a quarter of the device


def memory_budget_bytes(device: torch.device, budget_mb: int | None) -> int:
    """What `auto` lets a strategy with L x L tensors materialise (the `sdpa` path's, sdpa_bytes):
    `attention-memory-budget` MB, else a quarter of a CUDA device's total memory, or 1 GiB on CPU.

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


def auto_preferences(inputs: AttentionInputs) -> tuple[str, ...]:
    """The paths `auto` tries, fastest first, from measurements on CPU (docs/performance.md):
    - without terms or a window, `sdpa`: fused causal kernels, no L x L tensor;
    - on CPU, a distance-only method without dropout: `blocked`, which there materialises nothing
      (Toeplitz) and was the fastest path at every length measured, with gradients or not; for a
      method with a weight too, whose strided rows skip the future keys that `sdpa`'s written-out
      softmax computes (half the time at L = 1024 and 2048) and, in training, keep no [L, L] tensor
      for the backward (kerple_bias_weight's training step 1.10x `none` against 2.43x on `sdpa`, L = 512);
    - with packed documents masked (reset-attention-mask) not that: the Toeplitz row, one for the batch,
      cannot hold each row's documents (the last rule below);
    - on CPU, a method that rewrites the score matrix (cope, dape), without gradients: `blocked`, whose
      blocks skip the future keys (2 layers, 4 heads of 16 dims, one thread, L = 1024: cope 8.8k
      tokens/s against 3.9k on `sdpa`'s written-out matrix, dape V2 1.4k against 0.9k; equal at 512).
      With gradients `sdpa` (blocks recomputed in the backward: cope 5.4k against 4.1k tokens/s in
      training at L = 512, batch 4);
    - a score rewrite that needs the whole matrix at once (dape's authors' V2): `sdpa` alone;
    - otherwise `sdpa`, then `flex` on CUDA (no L x L tensor at all), then `blocked`;
    - on CUDA, before those, `fla`: flash-linear-attention's Triton kernels, which refuse every method but
      per-token terms alone, stick-breaking and key transforms (fox, cable, stickbreaking, path) and every
      forward they cannot compute exactly (fla_kernels.py); fox 0.0018 s against `sdpa`'s 0.0022 s and
      stickbreaking 0.0021 s against `sdpa_written_out`'s 0.0121 s (bf16, [2, 12, 2048, 64], forward and
      backward, an NVIDIA H200).
    - on CUDA, training a learnable distance table (KERPLE, T5, FIRE below its threshold): `triton` first
      (TRITON_FOR_LEARNABLE_TABLES_ON_CUDA), the flash kernel that sums the table's gradient per tile and keeps
      nothing [L, L]; a rule by design, not yet timed: the GPU check's training part measures it against the
      table gradient's side pass and `sdpa_mask_gradient`, and this rule follows those numbers.
    Never `flex` on CPU: compiling it costs about 7 s per new length, more than the work;
    `attention-impl: flex` still runs it there."""
    run = inputs.run
    if TRITON_FOR_LEARNABLE_TABLES_ON_CUDA and run.device_type == "cuda" and not inputs.has("query_terms") \
            and inputs.has("bias_gradient") and run.needs_grad:
        return ("triton", "sdpa", "flex", "blocked")  # where the kernel refuses (dropout, ...), the usual order
    if not (inputs.has_terms or run.windowed or run.documents):
        return ("sdpa",)
    if inputs.has("whole_matrix"):  # only the written-out matrix gives it (past the budget: the budget's refusal)
        return ("sdpa",)
    if run.device_type == "cpu" and not inputs.has("query_terms") and run.dropout_p == 0 and not run.documents:
        return ("blocked",)
    if run.device_type == "cpu" and inputs.has("score_rewrite") and not run.needs_grad:
        return ("blocked",)
    return ("sdpa", "blocked") if run.device_type == "cpu" else ("fla", "sdpa", "flex", "blocked")


def choose_strategy(impl: str, inputs: AttentionInputs, budget: int):
    """Resolve `attention_impl` to a strategy class; `auto` never returns one that cannot run here.

    `auto` takes the first of its preferences whose strategy can run and, if its memory grows with
    L^2 (`quadratic_memory`), whose `memory_bytes` fits in `budget` (memory_budget_bytes); the last
    preference is taken whatever its estimate. The inputs depend on the length, heads, batch, dtype,
    device and method, never on a layer, so one forward takes one strategy."""
    if impl not in ATTENTION_IMPLS:
        raise NeoXArgsError(f"attention-impl is {impl!r}; choose one of {', '.join(ATTENTION_IMPLS)}.")
    if impl != "auto":
        strategy, reason = strategy_for(impl, inputs)
        if strategy is None:
            raise NeoXArgsError(f"attention-impl is {impl!r}, but {reason}.")
        return within_budget(strategy, inputs, budget)
    preferences, missing = auto_preferences(inputs), []
    for path in preferences:
        strategy, _ = strategy_for(path, inputs)
        if strategy is None:
            missing += [(s.name, m) for s in PATH_STRATEGIES[path] if (m := s.missing_package(inputs)) is not None]
            continue
        if path == preferences[-1] or not strategy.quadratic_memory or strategy.memory_bytes(inputs) <= budget:
            for name, problem in missing:  # said once per process and message (Python's default warning filter)
                warnings.warn(f"attention-impl 'auto' would compute this forward with the {name!r} strategy, but "
                              f"{problem}; it takes {strategy.name!r} instead.", stacklevel=2)
            return within_budget(strategy, inputs, budget)
    raise AssertionError(f"no strategy for {inputs}")  # unreachable: `blocked` runs every method


def on_cuda(impl: str, inputs: AttentionInputs) -> str | None:
    """For `--dry-run`, which plans on the CPU: the strategy that runs only on CUDA (it neither handles nor
    requires the `cpu` need: fla's kernels) which `auto` takes for this forward on a CUDA device in bf16/fp16,
    or would take but for a package missing here; None where none would."""
    if impl != "auto":
        return None
    cuda = inputs.with_run(device_type="cuda", element_size=2)
    for path in auto_preferences(cuda):
        for strategy in PATH_STRATEGIES[path]:
            if "cpu" in strategy.handles | strategy.requires:
                continue
            if strategy.can_run(cuda) is None:
                return f"on CUDA in bf16/fp16 `auto` takes {strategy.name!r}"
            if (missing := strategy.missing_package(cuda)) is not None:
                return f"on CUDA in bf16/fp16 `auto` would take {strategy.name!r}, but {missing}"
    return None


def within_budget(strategy, inputs: AttentionInputs, budget: int):
    """`strategy`, or for a method that rewrites the score matrix (pe.modify_scores: its [b, H, q, k]
    tensors are written out on every path that can run it) a refusal, before anything is allocated, when
    its estimate passes `budget`: with the numbers and the longest length that fits."""
    run = inputs.run
    if not inputs.has("score_rewrite"):
        return strategy
    needed = strategy.memory_bytes(inputs)
    if needed <= budget:
        return strategy
    fits, lower, upper = lambda n: strategy.memory_bytes(inputs.with_run(length=n)) <= budget, 0, run.length
    while lower < upper:  # the longest length whose estimate fits (the estimates grow with the length)
        middle = (lower + upper + 1) // 2
        lower, upper = (middle, upper) if fits(middle) else (lower, middle - 1)
    raise NeoXArgsError(
        f"attention at {run.length} tokens ({run.batch} sequence(s), {run.heads} heads) would need about "
        f"{needed / 2**20:,.0f} MB per layer on the {strategy.name!r} strategy, past the memory budget of "
        f"{budget / 2**20:,.0f} MB: this positional method rewrites the score matrix, so its [b, H, q, k] scores "
        f"are written out. The longest length that fits is {lower} tokens. Evaluate at most that, lower "
        f"attention-block-size (the blocked path holds block x L), or raise attention-memory-budget.")


class StrategyCannotRun(NeoXArgsError):
    """A strategy named in `plan_attention(strategy=...)` cannot compute this forward; `reason` is its own."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"attention strategy {name!r} cannot run here: {reason}.")
        self.name, self.reason = name, reason


def forced_strategy(name: str, inputs: AttentionInputs):
    """The strategy called `name` (registry.STRATEGIES), or StrategyCannotRun with its reason."""
    strategy = STRATEGIES[name]
    if (reason := strategy.can_run(inputs)) is not None:
        raise StrategyCannotRun(name, reason)
    return strategy
