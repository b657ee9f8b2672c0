"""Upstream GPT-NeoX and KERPLE-fork configs run unmodified (tests/fixtures/neox: their keys and values,
their style): every upstream key is implemented, mapped, accepted with one start-up note, or refused
with a message; the generated key page is current; a tiny run starts from each config."""
import json
import sys

import pytest
import torch

import deepy
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.neox_arguments.upstream_compat import IGNORED_REASON, REFUSED_OFF, UPSTREAM_KEYS
from megatron.neox_arguments.upstream_treatments import IGNORED, MAPPED, REFUSED, VALUE_MAPPED
from tests.support.training import REPO_ROOT


FIXTURES = REPO_ROOT / "tests" / "fixtures" / "neox"


CONFIGS = {  # the table: files, and the --set the file needs (pos-emb where it has none)
    "kerple_train": (["kerple_local_setup.yml", "kerple_train.yml"], {"pos_emb": "kerple_log"}),
    "kerple_ex_eval": (["kerple_local_setup.yml", "kerple_ex_eval.yml"], {"pos_emb": "kerple_log"}),
    "neox_125M": (["neox_local_setup.yml", "neox_125M.yml"], {}),
    "neox_pythia_160M": (["neox_local_setup.yml", "neox_pythia_160M.yml"], {}),
    "neox_19M": (["neox_local_setup.yml", "neox_19M.yml"], {}),
    "neox_bf16_125M": (["neox_local_setup.yml", "neox_bf16_125M.yml"], {}),
}


def dry_run(files, overrides, capsys):
    flags = [f for k, v in overrides.items() for f in ("--set", f"{k}={v}")]
    assert deepy.main(["train.py", "-d", str(FIXTURES), *files, *flags, "--dry-run"]) == 0
    return capsys.readouterr().out


def args_of(name, **overrides):
    files, needed = CONFIGS[name]
    return NeoXArgs.from_ymls([FIXTURES / f for f in files], {**needed, **overrides})


# ------------------------------------------------------------------------------- tiny runs start
TINY = dict(tokenizer_type="ByteLevelTokenizer", num_layers=2, hidden_size=32, num_attention_heads=2,
            seq_length=32, max_position_embeddings=32, seq_length_val=32, train_micro_batch_size_per_gpu=2,
            gradient_accumulation_steps=1, train_iters=2, eval_iters=1, log_interval=1, split="90,8,2",
            tensorboard_dir=None, log_dir=None, num_workers=0)


@pytest.mark.parametrize("name", CONFIGS)
def test_public_configs_pass_dry_run_unmodified(name, capsys):
    out = dry_run(*CONFIGS[name], capsys)
    assert out.count("upstream GPT-NeoX / KERPLE-fork config key(s)") == 1  # one notice
    assert "distributed-backend" in out and "fused-kernel switch" in out
    assert "# DeepSpeed config" in out


def test_kerple_fork_keys_are_mapped(capsys):
    args = args_of("kerple_train")
    assert args.checkpoint_factor == 10000 and "save-interval" in args.config_sources["checkpoint_factor"]
    assert args.precision == "bf16" and args.bf16 == {"enabled": True} and args.fp16 is None
    assert args.deepspeed_config()["fp32_allreduce"] is True
    notes = {n.key: n.reason for n in args.upstream_notes}
    for key in ("checkpoint_validation_with_forward_pass", "wandb_host", "scaled-upper-triang-masked-softmax-fusion",
                "bias-gelu-fusion", "checkpoint-num-layers", "partition-activations", "synchronize-each-layer",
                "distributed-backend", "fp32_allreduce", "save-interval"):
        assert key in notes, key
    assert "kerple_train.yml:72" in args.upstream_notice()  # distributed-backend's line


def test_kerple_eval_config_means_evaluate_only():
    args = args_of("kerple_ex_eval")
    assert args.train_iters == 0 and args.seq_length_val == 2048


def test_upstream_configs_are_mapped():
    pythia = args_of("neox_pythia_160M")
    assert pythia.extra_save_iters[:3] == [0, 1, 2] and pythia.rotary_pct == 0.25 and pythia.gpt_j_residual
    assert "attention_config" in {n.key for n in pythia.upstream_notes}
    assert args_of("neox_19M").deepspeed_config()["comms_logger"]["enabled"] is True
    bf16 = args_of("neox_bf16_125M")
    assert bf16.precision == "bf16" and bf16.bf16 == {"enabled": True}
    assert args_of("neox_125M").pipe_parallel_size == 1


@pytest.mark.parametrize("key,value,expected", [
    ("pipe_parallel_size", 0, ("pipe_parallel_size", 1)),
    ("data_impl", "infer", ("data_impl", "mmap")),
    ("pos_emb", "kerple_power_ap_ap", ("pos_emb", "kerple_bias_weight")),
    ("pos_emb", "kerple_power_original", ("pos_emb", "alibi")),
    ("attention_config", [[["global"], "all"]], ("num_layers", 12)),
    ("use_wandb", None, ("use_wandb", False)),
    ("moe_num_experts", 1, ("pos_emb", "rotary")),  # refused key at its off value: no effect
])
def test_mapped_values(key, value, expected):
    args = args_of("neox_125M", **{key: value})
    assert getattr(args, expected[0]) == expected[1]


def test_lr_decay_fraction_sets_decay_iters():
    assert args_of("neox_125M", lr_decay_iters=None, lr_decay_fraction=0.5).lr_decay_iters == 160000
    with pytest.raises(NeoXArgsError, match="both set the decay length"):
        args_of("neox_125M", lr_decay_fraction=0.5)


def test_norm_epsilon_maps_only_for_rmsnorm():
    assert args_of("neox_125M", norm="rmsnorm", rms_norm_epsilon=1e-8).layernorm_epsilon == 1e-8
    assert args_of("neox_125M", rms_norm_epsilon=1e-8).layernorm_epsilon == 1e-5


@pytest.mark.parametrize("key,value,message", [
    ("moe_num_experts", 8, "asks for mixture of experts, which this project does not support"),
    ("attention_config", [[["global", "local"], 12]], "gives some layers ['local'] attention"),
    ("attention_config", [["global", 6]], "is not [[types], count]"),
    ("use_mup", True, "muP parameterisation"),
    ("num_kv_heads", 4, "architecture variants this model does not have"),
    ("mamba_use_bias_in_linears", True, "Mamba and RWKV blocks"),
    ("pipe_parallel_size", 2, "pipe-parallel-size: 2 is not supported yet"),
    ("model_parallel_size", 2, "model-parallel-size: 2 is not supported yet"),
    ("sparse_attention", {"mode": "fixed"}, "DeepSpeed features"),
    ("deepspeed_extra_args", {"train_batch_size": 7}, "deepspeed-extra-args sets train_batch_size to 7"),
    ("pos_emb", "kerple_power__ap", "weight-only kernel"),
])
def test_refused_with_a_clear_message(key, value, message):
    with pytest.raises(NeoXArgsError, match=None) as err:
        args_of("neox_125M", **{key: value}).deepspeed_config()
    assert message in str(err.value)


def test_save_interval_on_the_command_line_replaces_the_files_checkpoint_factor():
    # --set beats every file (tests/run/test_first_contact_small_items.py: two files that disagree are refused)
    assert args_of("neox_125M", save_interval=5).checkpoint_factor == 5


def test_refusal_names_file_and_line(tmp_path):
    (tmp_path / "moe.yml").write_text('{\n  "num_layers": 2,\n  "moe_num_experts": 4, # experts\n}\n')
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_ymls([FIXTURES / "neox_125M.yml", tmp_path / "moe.yml"])
    assert f"{tmp_path / 'moe.yml'}:3: 'moe_num_experts: 4'" in str(err.value)
    assert "docs/upstream-keys.md" in str(err.value)


def test_keys_upstream_never_had_stay_errors():
    with pytest.raises(NeoXArgsError, match="'hiden_size' is not a known config key. Did you mean 'hidden-size'"):
        args_of("neox_125M", hiden_size=64)


def test_train_iters_below_zero_is_refused():
    with pytest.raises(NeoXArgsError, match=r"train-iters: must be >= 0 \(0: evaluate"):
        args_of("neox_125M", train_iters=-1)


def test_every_upstream_key_has_exactly_one_treatment():
    known = set(NeoXArgs.user_keys())
    declared = [k for keys in IGNORED.values() for k in keys] + [k for keys in REFUSED.values() for k in keys]
    declared += list(MAPPED)
    assert len(declared) == len(set(declared)), "a key is declared twice in upstream_treatments.py"
    assert not set(declared) & known, "a treatment for a key this project implements"
    assert set(declared) <= set(UPSTREAM_KEYS), "a treatment for a key upstream does not have"
    assert set(VALUE_MAPPED) <= known
    untreated = [k for k in UPSTREAM_KEYS if k not in known and k not in declared]
    assert untreated == []
    assert len(UPSTREAM_KEYS) > 300 and set(IGNORED_REASON) | set(REFUSED_OFF) <= set(UPSTREAM_KEYS)


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "kerple_ex_eval"])
def test_a_tiny_run_starts_from_each_config(name, stdlib_data, tmp_path):
    from tests.support.training import pretrain
    torch.set_num_threads(1)
    args = args_of(name, data_path=stdlib_data, save=str(tmp_path / "ckpt"), load=None, **TINY)
    if args.fp16 and args.fp16.get("enabled"):  # DeepSpeed runs fp16 only on GPUs: the rest is as written
        args = args_of(name, data_path=stdlib_data, save=str(tmp_path / "ckpt"), load=None,
                       **{**TINY, "fp16.enabled": False})
    result = pretrain(args)
    assert sorted(result.losses) == [1, 2] and all(map(torch.isfinite, map(torch.tensor, result.losses.values())))
    saved = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    if name == "neox_pythia_160M":  # extra_save_iters [0, 1, 2, ...]
        assert {"global_step0", "global_step1", "global_step2"} <= set(saved)


def test_exit_interval_stops_and_saves(stdlib_data, tmp_path):
    from tests.support.training import pretrain
    torch.set_num_threads(1)
    args = args_of("kerple_train", data_path=stdlib_data, save=str(tmp_path / "ckpt"), load=None,
                   **{**TINY, "train_iters": 5, "exit_interval": 2, "precision": None, "fp16": None})
    result = pretrain(args)
    assert sorted(result.losses) == [1, 2] and result.preempted
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step2"


def test_train_iters_zero_evaluates_the_checkpoint(stdlib_data, tmp_path, capsys):
    """The fork's evaluation config: train 0 steps = score `load` at seq-length-val (evaluate.py's code)."""
    from tests.support.training import pretrain
    import train
    torch.set_num_threads(1)
    trained = args_of("kerple_train", data_path=stdlib_data, save=str(tmp_path / "ckpt"), load=None,
                      **{**TINY, "train_iters": 1})
    pretrain(trained)
    files, needed = CONFIGS["kerple_ex_eval"]
    argv = [str(FIXTURES / f) for f in files]
    overrides = {**needed, **TINY, "train_iters": 0, "seq_length_val": 64, "data_path": stdlib_data,
                 "load": str(tmp_path / "ckpt"), "eval_results_dir": str(tmp_path / "results"), "eval_chunks": 2}
    argv += [f for k, v in overrides.items() for f in ("--set", f"{k}={json.dumps(v) if v is not None else 'null'}")]
    sys_argv, sys.argv = sys.argv, ["train.py", *argv]
    try:
        assert train.main() == 0
    finally:
        sys.argv = sys_argv
    [result] = list((tmp_path / "results").glob("*.json"))
    lengths = {r["length"] for r in json.loads(result.read_text())["results"]}
    assert lengths == {64}
