"""The `triton` path: a flash-attention kernel that adds a distance-only method's per-distance tables inside
its tiles and returns their gradients (megatron/model/attention/triton_kernel.py): a learnable table (KERPLE,
T5, FIRE below its threshold, MEP-KERPLE) trains with nothing [L, L] written, forward or backward, and a fixed
one (ALiBi, Sandwich, MEP) evaluates at any length in O(L) memory.

Runs on CUDA (Triton compiles it), and on CPU only under Triton's interpreter (TRITON_INTERPRET=1 set before
triton is first imported: how the tests prove the kernel, in float32 and float64, slowly). Handles causal
attention, a window, packed documents (with positions restarting per document: the tables are read at the
index difference, which is the position difference inside a document), a bias table, a weight table
(kerple_bias_weight) and their gradients. Not dropout, positions that are not consecutive, terms that depend
on the query position itself, per-token terms, score rewrites, other normalisers or key transforms: each a
refusal naming it (`can_run`)."""
import importlib.util
import os
import sys

from megatron.model.attention import cpu_flash
from megatron.model.attention.strategy import AttentionPlan

LARGEST_HEAD_DIM = 256  # BLOCK_D up to 256: one tile of q, k, v and dO per program in registers


def interpreting() -> bool:
    """Triton's interpreter is asked for (its own reading of TRITON_INTERPRET: "1", "true", ...): kernels then run
    on CPU tensors through NumPy."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on", "y")


def interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run the kernel in this process, or None. Triton reads TRITON_INTERPRET when
    it is imported (its own library's functions are made then), so it must be set before anything imports triton:
    torch's compiler does, for example."""
    if not interpreting():
        return "TRITON_INTERPRET is not set"
    language = sys.modules.get("triton.language")
    if language is not None and type(language.zeros).__name__ != "InterpretedFunction":
        return ("TRITON_INTERPRET is set, but triton was imported in this process before it was (torch's compiler "
                "imports it too), and Triton reads it only then")
    return None


def triton_problem() -> str | None:
    """Why triton cannot be used here, or None."""
    if importlib.util.find_spec("triton") is None:
        return ("triton is not installed here; torch's CUDA wheels bring it (`pip install triton==3.9.0` otherwise, "
                "the version this project's kernel was checked with)")
    return None


class TritonFlash(AttentionPlan):
    name = path = "triton"
    # A CUDA kernel: the CPU (and gradients there) only in Triton's interpreter, which can_run admits.
    handles = frozenset({"bias_table", "weight", "bias_gradient", "gradients", "documents", "window", "sink",
                         "sink_off_cpu"})

    def __init__(self, pe, positions, *, bias_table, weight_table, **common):
        super().__init__(pe, positions, bias_table=bias_table, weight_table=weight_table, **common)
        self.bias_table, self.weight_table = bias_table, weight_table

    @classmethod
    def can_run(cls, inputs):
        """The needs (strategy.py; on the CPU under the interpreter those of the same forward on CUDA), then the
        device, the dtype and the head size, then whether triton imports."""
        run = inputs.run
        interpreted = run.device_type == "cpu" and interpreter_problem() is None
        if (reason := super().can_run(inputs.with_run(device_type="cuda") if interpreted else inputs)):
            return reason
        if run.device_type not in ("cpu", "cuda"):
            return (f"the Triton kernel runs on CUDA devices, and this forward runs on {run.device_type}. Set "
                    "attention-impl to 'auto'")
        if run.device_type == "cpu" and run.element_size == 2:
            return ("Triton's interpreter has no bf16 or fp16 arithmetic, and this forward computes in 16-bit floats "
                    "on the CPU. Compute in float32 or float64 there, or set attention-impl to 'auto'")
        if run.qk_head_dim > LARGEST_HEAD_DIM:
            widened = f" ({run.head_dim}, widened by the method)" if run.qk_head_dim != run.head_dim else ""
            return (f"the Triton kernel takes head dimensions up to {LARGEST_HEAD_DIM}, and this model's q and k "
                    f"have {run.qk_head_dim}{widened}. Set attention-impl to 'auto'")
        if (problem := triton_problem()) is not None:
            return f"{problem}. Or set attention-impl to 'auto'"
        return None

    @classmethod
    def missing_package(cls, inputs):
        """triton's absence, when it alone keeps the kernel from this forward (`auto` then says so)."""
        return triton_problem() if inputs.run.device_type == "cuda" and super().can_run(inputs) is None else None

    @classmethod
    def refusal(cls, need, inputs):
        """The reasons complete the sentence "attention-impl is 'triton', but ..." (choice.py): a user reads them."""
        if need in ("cpu", "cpu_gradients"):
            stale = f" ({interpreter_problem()})" if interpreting() else ""
            return ("Triton compiles its kernels for GPUs, and this forward runs on the CPU, where only Triton's "
                    f"interpreter runs them (slowly: for tests){stale}. Set attention-impl to 'auto' or 'blocked', run "
                    "on a CUDA device, or set TRITON_INTERPRET=1 before starting to run the kernel in the interpreter")
        what = {
            "query_terms": "this positional method's terms depend on the query position itself, not only on the "
                           "distance i - j, so it has no per-distance table for the kernel to read",
            "dropout": f"the Triton kernel does not apply attention dropout (attention-dropout {inputs.run.dropout_p})",
            "scattered_positions": "the positions are not consecutive, and the kernel reads the tables at the index "
                                   "difference i - j",
        }.get(need)
        if what is None:
            what = "the Triton kernel does not handle " + super().refusal(need, inputs).removeprefix("it does not handle ")
        return f"{what}. Set attention-impl to 'auto', 'sdpa' or 'blocked'"

    @classmethod
    def memory_bytes(cls, inputs):
        """Contiguous copies of q, k and v (at most three), the row log-sum-exp [b, H, L] (fp32 or wider), and
        in training rowsum(dO * O) and the tables' per-diagonal partial sums (two of [b, H, L / B, 2 B], about
        2 L each): linear in L."""
        run = inputs.run
        per_row = max(run.element_size, 4) * run.batch * run.heads * run.length
        return 3 * inputs.qkv_bytes + per_row * (1 + (1 + 2 * 2 if run.needs_grad else 0))

    def attend(self, q, k, v, dropout_p):
        """The kernel takes one head size for q, k and v; a method whose `rotate_qk` widens q and k (pope: 2D)
        gives a narrower v, which goes in with zero columns added and comes out with them dropped (a zero column
        of v adds nothing to the output; autograd drops its gradient)."""
        from megatron.model.attention.triton_kernel import flash_attention_with_distance_tables
        out = flash_attention_with_distance_tables(q, k, cpu_flash.as_wide_as(v, q), self.bias_table,
                                                   self.weight_table, self.documents, self.window, self.sink)
        return out[..., :v.shape[-1]]
