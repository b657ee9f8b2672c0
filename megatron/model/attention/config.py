"""The attention keys as the model reads them: one small config, checked in one place."""
from dataclasses import dataclass

import torch

from megatron.errors import NeoXArgsError
from megatron.model.attention.inputs import AttentionRun
from megatron.model.attention.flex_kernel import kernel_options_problem

ATTENTION_IMPLS = ("auto", "sdpa", "flex", "blocked", "fla", "triton", "sdpa_mask_gradient")


class AttentionConfigError(NeoXArgsError):
    """A bad attention key; `key` names it, so the config can point at the file and line."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def check_attention_sizes(window: int | None, block_size: int, memory_budget_mb: int | None = None) -> None:
    """attention-window, attention-block-size and attention-memory-budget are positive (or unset)."""
    if window is not None and window < 1:
        raise AttentionConfigError(
            "attention_window", f"attention-window is {window}; it must be a positive number of tokens (or unset).")
    if block_size < 1:
        raise AttentionConfigError(
            "attention_block_size", f"attention-block-size is {block_size}; it must be a positive number of queries.")
    if memory_budget_mb is not None and memory_budget_mb < 1:
        raise AttentionConfigError(
            "attention_memory_budget", f"attention-memory-budget is {memory_budget_mb}; it must be a positive "
            "number of MB (or unset, for the device's default).")


@dataclass(frozen=True)
class AttentionConfig:
    impl: str = "auto"             # attention-impl: auto | sdpa | flex | blocked | fla | triton | sdpa_mask_gradient
    block_size: int = 512          # attention-block-size
    window: int | None = None      # attention-window
    dropout: float = 0.0           # attention-dropout
    memory_budget_mb: int | None = None  # attention-memory-budget
    flex_kernel_options: dict | None = None  # attention-flex-kernel-options (CUDA's flex kernel)

    def __post_init__(self):
        check_attention_sizes(self.window, self.block_size, self.memory_budget_mb)
        if (problem := kernel_options_problem(self.flex_kernel_options)) is not None:
            raise AttentionConfigError("attention_flex_kernel_options", f"attention-flex-kernel-options: {problem}")

    def run(self, *, window: int | None, training: bool, dtype: torch.dtype, batch: int, documents=None,
            row_positions=None, sink: bool = False) -> AttentionRun:
        """What one forward asks of attention under these keys: `window` is the layer's (a layer pattern may
        set its own), dropout only in training, gradients when autograd records."""
        return AttentionRun(impl=self.impl, window=window, block_size=self.block_size,
                            needs_grad=torch.is_grad_enabled(), dropout_p=self.dropout if training else 0.0,
                            dtype=dtype, batch=batch, memory_budget_mb=self.memory_budget_mb,
                            flex_kernel_options=self.flex_kernel_options, documents=documents,
                            row_positions=row_positions, sink=sink)
