"""The config system: merging, normalisation, errors (by message), derived values."""
import json
import textwrap

import pytest

from megatron.neox_arguments.to_model import positional_embedding
from megatron.neox_arguments import POS_EMB_CHOICES, NeoXArgs, NeoXArgsError


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def minimal(**extra):
    return {"train_micro_batch_size_per_gpu": 4, **extra}


def test_megatron_core_still_imports_next_to_our_package():
    import megatron.core.datasets.indexed_dataset as indexed
    import megatron.neox_arguments

    assert hasattr(indexed, "IndexedDataset")
    assert "site-packages" in indexed.__file__ and "site-packages" not in megatron.neox_arguments.__file__


def test_dash_and_underscore_are_the_same_key(tmp_path):
    a = write(tmp_path, "a.yml", "train-iters: 7\nnum_layers: 3\ntrain_micro_batch_size_per_gpu: 2\n")
    args = NeoXArgs.from_ymls([a])
    assert (args.train_iters, args.num_layers) == (7, 3)


def test_later_file_wins_and_sources_name_the_file_and_line(tmp_path):
    a = write(tmp_path, "a.yml", "train-iters: 7\nseed: 1\ntrain_micro_batch_size_per_gpu: 2\n")
    b = write(tmp_path, "b.yml", "# comment\ntrain_iters: 9\n")
    args = NeoXArgs.from_ymls([a, b])
    assert args.train_iters == 9 and args.seed == 1
    assert args.config_sources["train_iters"] == f"{b}:2"
    assert args.config_sources["seed"] == f"{a}:2"
    described = args.describe()
    assert f"# {b}:2" in [line.split("  ")[-1] for line in described.splitlines() if line.startswith("train_iters")][0]
    assert "default" in [line for line in described.splitlines() if line.startswith("hidden_size")][0]


def test_same_key_twice_in_one_file_under_both_spellings_is_rejected(tmp_path):
    a = write(tmp_path, "a.yml", "train-iters: 7\ntrain_iters: 8\n")
    with pytest.raises(NeoXArgsError, match=r"line 2: key 'train_iters' repeats 'train_iters' already set on line 1"):
        NeoXArgs.from_ymls([a])


def test_command_line_override_beats_files(tmp_path):
    a = write(tmp_path, "a.yml", "train-iters: 7\ntrain_micro_batch_size_per_gpu: 2\n")
    args = NeoXArgs.from_ymls([a], overrides={"train-iters": 11})
    assert args.train_iters == 11 and args.config_sources["train_iters"] == "command line"


def test_extends_reads_the_base_first(tmp_path):
    write(tmp_path, "base.yml", "num-layers: 12\nhidden-size: 768\ntrain_micro_batch_size_per_gpu: 2\n")
    child = write(tmp_path, "child.yml", "extends: [base.yml]\nnum-layers: 4\n")
    args = NeoXArgs.from_ymls([child])
    assert (args.num_layers, args.hidden_size) == (4, 768)


def test_neox_flow_style_with_comments_trailing_commas_python_true_and_exponent_floats(tmp_path):
    a = write(tmp_path, "a.yml", """\
        {
          # NeoX ships JSON-like files
          "no-weight-tying": True,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3,},},
          "min_lr": 1e-5,
          "train_micro_batch_size_per_gpu": 2,
        }
        """)
    args = NeoXArgs.from_ymls([a])
    assert args.no_weight_tying is True
    assert args.lr == pytest.approx(1e-3) and isinstance(args.min_lr, float) and args.min_lr == pytest.approx(1e-5)


def test_nested_deepspeed_dicts_pass_through_untouched(tmp_path):
    a = write(tmp_path, "a.yml", """\
        zero_optimization: {stage: 2, allgather-bucket-size: 500000000, contiguous_gradients: true}
        train_micro_batch_size_per_gpu: 2
        """)
    ds = NeoXArgs.from_ymls([a]).deepspeed_config()
    assert ds["zero_optimization"] == {"stage": 2, "allgather-bucket-size": 500000000, "contiguous_gradients": True}


def test_unknown_key_names_the_file_and_suggests(tmp_path):
    a = write(tmp_path, "a.yml", "train_micro_batch_size_per_gpu: 2\nnum-layer: 3\n")
    with pytest.raises(NeoXArgsError, match=rf"{a}:2: 'num-layer' is not a known config key. Did you mean 'num-layers'\?"):
        NeoXArgs.from_ymls([a])


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(NeoXArgsError, match="does not exist"):
        NeoXArgs.from_ymls([tmp_path / "nope.yml"])


def test_invalid_yaml_is_a_clear_error(tmp_path):
    a = write(tmp_path, "a.yml", "num-layers: [1, 2\n")
    with pytest.raises(NeoXArgsError, match="is not valid YAML"):
        NeoXArgs.from_ymls([a])


@pytest.mark.parametrize("values, message", [
    (minimal(num_layers="twelve"), r"num-layers must be an integer, got 'twelve'"),
    (minimal(no_weight_tying="yes"), r"no-weight-tying must be true or false"),
    (minimal(hidden_size=100, num_attention_heads=12), r"12 heads do not divide hidden-size 100"),
    (minimal(pos_emb="learned", seq_length=1024, max_position_embeddings=512),
     r"max-position-embeddings: 512 is smaller than seq-length 1024"),
    (minimal(pos_emb="kerple_lgo"), r"unknown positional method 'kerple_lgo'. Did you mean 'kerple_log'\?"),
    (minimal(norm="batchnorm"), r"norm is 'batchnorm', which is not one of \['layernorm', 'rmsnorm'\]"),
    (minimal(hidden_dropout=1.5), r"hidden-dropout: must lie in \[0, 1\]"),
    (minimal(model_parallel_size=2), r"model-parallel-size: 2 is not supported yet"),
    (minimal(pipe_parallel_size=4), r"pipe-parallel-size: 4 is not supported yet"),
    (minimal(fp16={"enabled": True}, bf16={"enabled": True}), r"fp16 and bf16 are both enabled"),
    (minimal(optimizer={"type": "SGD", "params": {"lr": 0.1}}), r"type 'SGD' is not supported"),
    (minimal(optimizer={"type": "Adam", "params": {}}), r"params.lr is missing"),
    (minimal(optimizer={"type": "Adam", "params": {"lr": "fast"}}), r"optimizer.params.lr must be a number, got 'fast'"),
    (minimal(eval_modes=["nonoverlap", "strided"]), r"unknown mode\(s\) \['strided'\]"),
    (minimal(num_layers=0), r"num-layers: must be a positive integer, got 0"),
    (minimal(rpe_num_buckets=0), r"rpe-num-buckets: must be a positive integer, got 0"),
    (minimal(rotary_pct=1.5), r"rotary-pct: must lie in \(0, 1\], got 1.5"),
    (minimal(pos_emb="t5", rpe_num_buckets=300), r"rpe-num-buckets: pos-emb 't5' needs 2 <= rpe-num-buckets < 2 \* "
                                                 r"rpe-max-distance, got rpe-num-buckets=300, rpe-max-distance=128"),
    (minimal(pos_emb="mep_kerple", mep_weights=[1, 2]), r"mep-weights: mep-weights=\[1, 2\] must be 4 positive numbers"),
    (minimal(attention_window=0), r"attention-window is 0; it must be a positive number of tokens"),
    (minimal(attention_block_size=0), r"attention-block-size is 0; it must be a positive number of queries"),
    (minimal(eval_stride=0), r"eval-stride: must be a positive integer \(or null for the default\), got 0"),
    ({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4}, r"10 is not divisible by micro batch 4"),
    ({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
     r"16 != micro batch 4 x gradient-accumulation-steps 2 x data-parallel size 1 = 8"),
    ({}, r"no batch size is set"),
])
def test_bad_values_give_one_clear_error(values, message):
    with pytest.raises(NeoXArgsError, match=message):
        NeoXArgs.from_dict(values)


def test_error_names_the_file_and_line_of_the_bad_value(tmp_path):
    a = write(tmp_path, "a.yml", "train_micro_batch_size_per_gpu: 2\nhidden-size: 100\nnum-attention-heads: 12\n")
    with pytest.raises(NeoXArgsError, match=rf"^{a}:3: num-attention-heads: 12 heads do not divide"):
        NeoXArgs.from_ymls([a])


def test_a_method_option_set_in_the_config_reaches_the_built_method():
    default = positional_embedding(NeoXArgs.from_dict(minimal(pos_emb="kerple_log"))).options.kerple_eps
    args = NeoXArgs.from_dict(minimal(pos_emb="kerple_log", **{"kerple-eps": 2 * default}))  # flat, NeoX-style keys
    assert positional_embedding(args).options.kerple_eps == 2 * default


@pytest.mark.parametrize("alias, canonical", [("kerple_power_ap_", "kerple_power"), ("rpe", "t5")])
def test_kerple_fork_spellings_are_aliases(alias, canonical):
    assert NeoXArgs.from_dict(minimal(pos_emb=alias)).pos_emb == canonical


def test_seq_length_val_and_max_positions_default_to_seq_length():
    args = NeoXArgs.from_dict(minimal(seq_length=128))
    assert args.seq_length_val == 128 and args.max_position_embeddings == 128
    assert NeoXArgs.from_dict(minimal(seq_length=128, seq_length_val=2048)).seq_length_val == 2048


@pytest.mark.parametrize("given, world, expected", [
    ({"train_micro_batch_size_per_gpu": 4}, 1, (4, 4, 1)),
    ({"train_micro_batch_size_per_gpu": 4}, 2, (8, 4, 1)),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3}, 2, (24, 4, 3)),
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}, 2, (32, 4, 4)),
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 2, (32, 8, 2)),
    ({"train_batch_size": 32}, 4, (32, 8, 1)),
])
def test_batch_sizes_derive_from_any_two(given, world, expected):
    args = NeoXArgs.from_dict(given, world_size=world)
    assert (args.train_batch_size, args.train_micro_batch_size_per_gpu, args.gradient_accumulation_steps) == expected


def test_precision_is_derived_from_the_dicts_and_fills_them():
    assert NeoXArgs.from_dict(minimal(bf16={"enabled": True})).precision == "bf16"
    assert NeoXArgs.from_dict(minimal(fp16={"enabled": True, "loss_scale": 0})).precision == "fp16"
    assert NeoXArgs.from_dict(minimal()).precision == "fp32"
    args = NeoXArgs.from_dict(minimal(precision="bf16"))
    assert args.bf16 == {"enabled": True}
    # fp32 weights under DeepSpeed's bf16 autocast by default; DeepSpeed's bf16 engine with bf16-weights: bf16
    assert args.deepspeed_config()["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert "bf16" not in args.deepspeed_config()
    engine = NeoXArgs.from_dict(minimal(precision="bf16", bf16_weights="bf16")).deepspeed_config()
    assert engine["bf16"] == {"enabled": True} and "torch_autocast" not in engine
    with pytest.raises(NeoXArgsError, match="bf16-weights: chooses how bf16 trains, but precision is fp32; remove it or set precision: bf16"):
        NeoXArgs.from_dict(minimal(bf16_weights="bf16"))
    with pytest.raises(NeoXArgsError, match="precision: is 'fp16' but the bf16 dict is enabled"):
        NeoXArgs.from_dict(minimal(precision="fp16", bf16={"enabled": True}))


def test_deepspeed_config_is_derived_from_the_same_yaml(repo_root):
    args = NeoXArgs.from_ymls([repo_root / "configs" / "kerple_log.yml"], world_size=1)
    ds = args.deepspeed_config()
    assert ds["train_batch_size"] == 32 and ds["train_micro_batch_size_per_gpu"] == 32
    assert ds["gradient_accumulation_steps"] == 1 and ds["gradient_clipping"] == 1.0
    assert ds["optimizer"] == {"type": "Adam", "params": {"lr": 6e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                          "weight_decay": 0.0}}
    assert ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"} and ds["zero_optimization"] == {"stage": 0}
    json.dumps(ds)  # must be JSON


def test_paper_config_is_the_162m_setup(repo_root):
    args = NeoXArgs.from_ymls([repo_root / "configs" / "kerple_log.yml"])
    assert (args.num_layers, args.hidden_size, args.num_attention_heads, args.seq_length) == (12, 768, 12, 512)
    assert args.max_position_embeddings == 512 and args.no_weight_tying and args.pos_emb == "kerple_log"
    assert (args.train_iters, args.lr_decay_style, args.warmup, args.weight_decay) == (50000, "cosine", 0.01, 0.0)
    assert args.split == "949,50,1" and args.precision == "bf16"


@pytest.mark.parametrize("name", POS_EMB_CHOICES)
def test_every_method_has_a_paper_config(repo_root, name):
    if not (repo_root / "configs" / f"{name}.yml").exists():
        pytest.skip(f"{name} has no configs/{name}.yml: a method added as one file (docs/positional-methods.md) "
                    "trains on configs/tiny.yml and needs no paper config")
    args = NeoXArgs.from_ymls([repo_root / "configs" / f"{name}.yml"])
    assert args.pos_emb == name and args.num_layers == 12


def test_dotted_override_sets_a_nested_deepspeed_key(repo_root):
    args = NeoXArgs.from_ymls([repo_root / "configs" / "kerple_log.yml"],
                              overrides={"optimizer.params.lr": 1e-3, "zero_optimization.stage": 1})
    assert args.lr == 1e-3 and args.optimizer["params"]["betas"] == [0.9, 0.999]
    assert args.zero_optimization == {"stage": 1}
    with pytest.raises(NeoXArgsError, match="'seed' is not a mapping"):
        NeoXArgs.from_ymls([repo_root / "configs" / "kerple_log.yml"], overrides={"seed.x": 1})
