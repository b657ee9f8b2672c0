"""The model sizes the GPU check measures: the paper's 162M setup, and a tiny one for CPU smoke runs.

Random tokens stand in for data (the content does not change the cost), so no tokenizer files are
needed: the vocabulary size is the tokenizer's, padded as build_tokenizer pads it.
"""
import pathlib

from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer.tokenizer import rows_for

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT2_VOCAB = 50257      # GPT-2 BPE, what configs/local_setup.yml and the paper use
BYTE_VOCAB = 258        # ByteLevelTokenizer: 256 bytes + eod + pad (configs/tiny.yml)
NO_OUTPUT = {"save": None, "load": None, "tensorboard_dir": None, "log_dir": None, "use_wandb": False}

# Methods of the speed table: the paper's Table 4, FIRE, and `none`, the baseline of the ratios.
TABLE4_METHODS = ("kerple_log", "kerple_power", "alibi", "t5", "fire", "rotary", "sinusoidal", "none")
# Those also timed on the `triton` kernel (a per-distance table inside flash attention), and of them the ones
# whose table learns, also on `sdpa_mask_gradient` (FIRE: while its tables are per-distance, below its threshold).
KERNEL_METHODS = ("alibi", "kerple_log", "kerple_power", "t5", "fire")
LEARNABLE_TABLE_METHODS = ("kerple_log", "kerple_power", "t5", "fire")
# Eval lengths: 4k to 1M tokens on the 162M model (the part stops where its time or the memory runs out, and
# says which); short ones for the tiny smoke run.
EVAL_LENGTHS = {"162M": (4096, 16384, 65536, 262144, 1048576), "tiny": (128, 256)}
GPU_MINI_SWEEP = REPO_ROOT / "configs" / "reproduce" / "gpu-mini.yml"


def model_args(profile: str, method: str, **overrides) -> tuple[NeoXArgs, int, int]:
    """(NeoXArgs of `method` at this profile, the tokenizer's vocabulary size, the model's padded one);
    no tokenizer is built."""
    if profile == "162M":
        args = NeoXArgs.from_ymls([REPO_ROOT / "configs" / f"{method}.yml"], {**NO_OUTPUT, **overrides})
        vocab = GPT2_VOCAB
    elif profile == "gpu-mini":
        from tools.reproduce.spec import load_sweep
        sweep = load_sweep(GPU_MINI_SWEEP)
        args = NeoXArgs.from_ymls([REPO_ROOT / p for p in sweep.profile],
                                  {**sweep.overrides, **NO_OUTPUT, "pos_emb": method, **overrides})
        vocab = GPT2_VOCAB
    elif profile == "tiny":
        tiny = {"train_micro_batch_size_per_gpu": 4, "attention_block_size": 512, "pos_emb": method}
        args = NeoXArgs.from_ymls([REPO_ROOT / "configs" / "tiny.yml"], {**tiny, **NO_OUTPUT, **overrides})
        vocab = BYTE_VOCAB
    else:
        raise ValueError(f"unknown profile {profile!r}")
    return args, vocab, rows_for(vocab, args.make_vocab_size_divisible_by)


def describe(args) -> str:
    return (f"{args.num_layers} layers, hidden {args.hidden_size}, {args.num_attention_heads} heads, "
            f"seq {args.seq_length}, micro-batch {args.train_micro_batch_size_per_gpu}, {args.precision}")
