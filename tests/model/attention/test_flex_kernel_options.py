"""`attention-flex-kernel-options`: checked against torch's own FlexKernelOptions (keys, fwd_/bwd_
prefixes, types, BACKEND's values, power-of-two block sizes), carried by the flex plan, and given to the
kernel off the CPU only (the compiled CPU kernel has none of these knobs, and keeps its eager check)."""
import pytest
import torch

from megatron.errors import NeoXArgsError
from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.flex_kernel import run_flex
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgs

BASE = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 16,
        "train_micro_batch_size_per_gpu": 1, "tokenizer_type": "ByteLevelTokenizer", "pos_emb": "alibi"}


def test_torchs_options_are_accepted():
    options = {"BLOCK_M": 64, "BLOCK_N": 32, "fwd_num_warps": 4, "bwd_BLOCK_M1": 16, "BACKEND": "FLASH",
               "PRESCALE_QK": True}
    assert NeoXArgs.from_dict(BASE | {"attention_flex_kernel_options": options}).attention_flex_kernel_options == options


@pytest.mark.parametrize("options,message", [
    ({"BLOCK_M": 48}, r"BLOCK_M is 48; it must be a positive integer, a power of two"),
    ({"BLOK_M": 64}, r"'BLOK_M' is not one of torch's FlexAttention kernel options \(BACKEND, .*BLOCK_M, "),
    ({"BACKEND": "CUTE"}, r"BACKEND is 'CUTE'; torch accepts \['AUTO', 'TRITON', 'FLASH', 'TRITON_DECODE'\]"),
    ({"PRESCALE_QK": 1}, r"PRESCALE_QK is 1; it must be true or false"),
    ({"num_warps": 0}, r"num_warps is 0; it must be a positive integer\."),
])
def test_a_bad_option_is_one_paragraph_naming_it(options, message):
    with pytest.raises(NeoXArgsError, match=r"attention-flex-kernel-options: " + message):
        NeoXArgs.from_dict(BASE | {"attention_flex_kernel_options": options})


def test_the_flex_plan_carries_them():
    pe = build_positional_embedding("alibi", num_heads=4, head_dim=8)
    plan = plan_attention(pe, torch.arange(256), AttentionRun(impl="flex", window=None, block_size=64, needs_grad=False,
                                                              dropout_p=0.0, flex_kernel_options={"BLOCK_M": 64}))
    assert plan.name == "flex" and plan.kernel_options == {"BLOCK_M": 64}


def test_they_reach_the_kernel_off_the_cpu_and_not_on_it():
    calls = []

    def kernel(q, k, v, **kwargs):  # records what run_flex hands the kernel
        calls.append(kwargs)
        return torch.zeros_like(q)

    q = torch.zeros(1, 1, 128, 8, device="meta")  # a non-CPU device: the CUDA branch, no check
    run_flex(q, q, q, None, None, kernel=kernel, kernel_options={"BLOCK_M": 64})
    assert calls[-1]["kernel_options"] == {"BLOCK_M": 64}
    q = torch.zeros(1, 1, 128, 8)
    block_mask = type("Mask", (), {"mask_mod": staticmethod(lambda b, h, i, j: i >= j)})()
    with pytest.raises(NeoXArgsError, match="gave wrong numbers"):  # zeros are not attention: the CPU check
        run_flex(q + 1, q + 1, torch.randn_like(q), lambda s, b, h, i, j: s, block_mask, kernel=kernel,
                 kernel_options={"BLOCK_M": 64})
    assert "kernel_options" not in calls[-1]
