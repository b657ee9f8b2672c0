"""Hostile inputs, round 2 (issue 24), config side: YAML that repeats keys at any depth, merge keys,
"billion laughs" aliases, non-finite and out-of-range numbers, optimizer parameters torch refuses,
and path names too long for the filesystem. Each is one NeoXArgsError naming the file, line and key
path, raised while loading the config (the entry point's one paragraph: through deepy.py's main here, and a launch
in tests/e2e/hostile/test_hostile_config_values.py)."""
import os
import time

import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.quoting import QUOTE_LIMIT, quote
from megatron.neox_arguments.yaml_loader import load_config_files
from tests.support.config_files import BASE, OPTIMIZER, billion_laughs, write
from tests.support.hostile import assert_clear_error, entry_point_in_process


def refused(tmp_path, text, *fragments, overrides=None):
    path = write(tmp_path, text)
    with pytest.raises(NeoXArgsError) as info:
        NeoXArgs.from_ymls([path], overrides)
    message = str(info.value)
    for fragment in fragments:
        assert fragment.replace("FILE", str(path)) in message, message
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------ row 11: repeats at any depth
def test_a_key_repeated_inside_a_nested_mapping_is_refused_with_its_path_and_lines(tmp_path):
    refused(tmp_path, BASE + "optimizer:\n  type: Adam\n  params:\n    lr: 1.0e-3\n    lr: 5.0\n",
            "FILE line 9: key 'optimizer.params.lr' is given twice in the same mapping (first on line 8)",
            "Keep one of them")


def test_a_key_repeated_in_a_flow_mapping_inside_a_list_is_refused(tmp_path):
    refused(tmp_path, BASE + "deepspeed_extra_args: {comms_logger: {enabled: true, enabled: false}}\n",
            "FILE line 5: key 'deepspeed-extra-args.comms_logger.enabled' is given twice")
    refused(tmp_path, BASE + "train_data_weights: [{a: 1, a: 2}]\n",
            "key 'train-data-weights[0].a' is given twice")


def test_top_level_repeats_are_still_refused_as_before(tmp_path):
    refused(tmp_path, BASE + "train-iters: 1\ntrain_iters: 2\n",
            "FILE line 6: key 'train_iters' repeats 'train_iters' already set on line 5")


# ------------------------------------------------------------------------------- row 23: merge keys
def test_a_top_level_merge_key_is_read_as_yaml_defines_it(tmp_path):
    path = write(tmp_path, """\
        train_micro_batch_size_per_gpu: 4
        hidden_size: 64
        <<: {num_layers: 3, num-attention-heads: 4, seed: 7}
        seed: 9
        optimizer:
          <<: &adam {type: Adam}
          params: {lr: 1.0e-3}
        """)
    args = NeoXArgs.from_ymls([path])
    assert (args.num_layers, args.num_attention_heads, args.seed) == (3, 4, 9)  # written beside `<<` wins
    assert args.optimizer["type"] == "Adam"
    assert args.config_sources["num_layers"] == f"{path}:3"  # the anchor's line
    assert args.config_sources["seed"] == f"{path}:4"


def test_merged_keys_from_an_anchor_count_as_set_on_the_anchor_line(tmp_path):
    path = write(tmp_path, """\
        optimizer:
          type: Adam
          params: &p
            lr: 1.0e-3
            eps: 1.0e-8
        deepspeed_extra_args:
          copy:
            <<: *p
            eps: 1.0e-6
        """)
    values, sources, _ = load_config_files([path])
    assert values["deepspeed_extra_args"] == {"copy": {"lr": 1.0e-3, "eps": 1.0e-6}}
    assert sources["deepspeed_extra_args.copy.lr"] == f"{path}:4"  # the anchor's line
    assert sources["deepspeed_extra_args.copy.eps"] == f"{path}:9"


def test_merge_key_mistakes_are_one_paragraph(tmp_path):
    refused(tmp_path, BASE + "<<: [1, 2]\n", "FILE line 5: '<<': a merge key takes a mapping")
    refused(tmp_path, BASE + "<<: {seed: 1}\n<<: {seed: 2}\n", "FILE line 6: '<<' is given twice")
    refused(tmp_path, BASE + "<<: {nmu_layers: 3}\n", "FILE:5: 'nmu_layers' is not a known config key",
            "Did you mean 'num-layers'?")


# ------------------------------------------------------------ row 6: billion laughs, bounded messages
@pytest.fixture
def deadline():
    """Fail (instead of hanging) when the block takes more than `seconds`."""
    import signal

    def expired(*_):
        raise TimeoutError("the config loader took too long: it expanded the aliases")

    def arm(seconds):
        signal.signal(signal.SIGALRM, expired)
        signal.alarm(seconds)
    yield arm
    signal.alarm(0)


@pytest.mark.parametrize("key", ["eval-lengths", "wandb_group"])
def test_billion_laughs_in_a_real_key_is_refused_at_once(key, tmp_path, deadline):
    deadline(20)
    start = time.monotonic()
    message = refused(tmp_path, billion_laughs(key), "Config file FILE: its aliases (*name) expand to",
                      "more than the 100,000 that aliases may add to a config")
    assert time.monotonic() - start < 5
    assert len(message) < 1000


def test_billion_laughs_on_the_command_line_is_refused_too(tmp_path, deadline):
    value = "[" + ", ".join(["*a8"] * 9) + "]"
    anchors = "".join(f"&a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else '1'}], " for i in range(9))
    deadline(20)
    with pytest.raises(NeoXArgsError, match=r"--set 'eval-lengths=.*\(cut\): its aliases"):
        from megatron.neox_arguments import parse_overrides
        parse_overrides([f"eval-lengths=[{anchors}{value}]"])


def test_aliases_that_add_a_few_values_are_fine(tmp_path):
    path = write(tmp_path, BASE + "eval_lengths: &l [64, 128]\nprobe_depths: [0.0, 1.0]\n"
                               "deepspeed_extra_args: {a: *l, b: *l}\n")
    assert NeoXArgs.from_ymls([path]).eval_lengths == [64, 128]


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    refused(tmp_path, BASE + "eval_lengths: &l [64, *l]\n", "FILE line 5: an alias (*name) refers to the "
            "mapping or list that contains it")


def test_a_huge_value_is_quoted_cut_in_every_message(tmp_path):
    long_list = "[" + ", ".join(["-1"] * 50_000) + "]"
    message = refused(tmp_path, BASE + f"eval_lengths: {long_list}\n",
                      "eval-lengths: must be a list of positive integers, got [-1, -1", "...(cut)")
    assert len(message) < 2 * QUOTE_LIMIT + 200
    message = refused(tmp_path, BASE + f"wandb_group: {long_list}\n", "wandb-group must be a string, got [-1",
                      "...(cut)")
    assert len(message) < 2 * QUOTE_LIMIT + 200
    message = refused(tmp_path, BASE + "x" * 1000 + ": 1\n", "'xxxx", "...(cut) is not a known config key")
    assert len(message) < 2 * QUOTE_LIMIT + 200


def test_quote_builds_only_what_it_shows():
    nested = [1] * 9
    for _ in range(12):  # 9**13 items if formatted whole
        nested = [nested] * 9
    start = time.monotonic()
    text = quote(nested)
    assert time.monotonic() - start < 0.5
    assert text.startswith("[[[[") and text.endswith("...(cut)") and len(text) == QUOTE_LIMIT + len("...(cut)")
    assert quote({"a": [1, None]}) == "{'a': [1, None]}" and quote(True, as_json=True) == "true"
    assert quote("y" * 10_000, as_json=True).startswith('"yyy') and len(quote("y" * 10_000)) < QUOTE_LIMIT + 10


def test_an_integer_too_long_to_read_is_one_paragraph(tmp_path):
    refused(tmp_path, BASE + "seed: " + "9" * 5000 + "\n", "FILE line 5: the value '9999", "cannot be read")


def test_an_upstream_attention_config_with_a_huge_count_is_not_expanded(tmp_path, deadline):
    deadline(20)
    path = write(tmp_path, BASE + 'attention_config: [[["global"], 1000000000000]]\n')
    assert NeoXArgs.from_ymls([path]).num_layers == 2
    refused(tmp_path, BASE + 'attention_config: [[["global", "local"], 1000000000000]]\n',
            "attention_config gives some layers ['local'] attention")


# ------------------------------------------------------ rows 13, 17: every number finite, clipping >= 0
@pytest.mark.parametrize("line, path", [
    ("optimizer: {type: Adam, params: {lr: .inf}}", "FILE line 5: optimizer.params.lr"),
    ("optimizer: {type: Adam, params: {lr: 1.0e-3, eps: .nan}}", "FILE line 5: optimizer.params.eps"),
    ("optimizer:\n  type: Adam\n  params:\n    lr: 1.0e-3\n    betas: [0.9, .inf]",
     "FILE line 9: optimizer.params.betas[1]"),
    ("gradient_clipping: .inf", "FILE line 5: gradient-clipping"),
    ("temperature: .nan", "FILE line 5: temperature"),
    ("temperature: .inf", "FILE line 5: temperature"),
    ("top_p: -.inf", "FILE line 5: top-p"),
    ("weight_decay: .nan", "FILE line 5: weight-decay"),
    ("probe_depths: [0.0, .nan]", "FILE line 5: probe-depths[1]"),
    ("eval_task_limit: .inf", "FILE line 5: eval-task-limit"),
    ("layernorm_epsilon: .inf", "FILE line 5: layernorm-epsilon"),
])
def test_no_config_number_may_be_nan_or_infinite(line, path, tmp_path):
    message = refused(tmp_path, BASE + line + "\n", "must be a finite number")
    assert message.startswith(path.replace("FILE line ", str(tmp_path / "c.yml") + ":")), message


@pytest.mark.parametrize("setting", ["optimizer.params.lr=.inf", "temperature=.nan", "min_lr=.inf"])
def test_non_finite_numbers_from_the_command_line_are_refused(setting, tmp_path):
    from megatron.neox_arguments import parse_overrides
    key = setting.split("=")[0]
    refused(tmp_path, BASE + "optimizer: {type: Adam, params: {lr: 1.0e-3}}\n",
            f"command line: {key.replace('_', '-')}: must be a finite number",
            overrides=parse_overrides([setting]))


@pytest.mark.parametrize("text", ["inf", "nan", "-Infinity"])
def test_a_string_that_python_reads_as_infinite_is_not_a_number(text, tmp_path):
    refused(tmp_path, BASE + f"temperature: '{text}'\n", f"temperature must be a number, got '{text}'")
    refused(tmp_path, BASE + f"optimizer: {{type: Adam, params: {{lr: '{text}'}}}}\n",
            f"optimizer.params.lr must be a number, got '{text}'")


def test_negative_gradient_clipping_is_refused_and_zero_means_off(tmp_path):
    refused(tmp_path, BASE + "gradient_clipping: -1\n", "FILE:5: gradient-clipping: must be >= 0",
            "0 turns clipping off", "got -1.0")
    args = NeoXArgs.from_ymls([write(tmp_path, BASE + "gradient_clipping: 0\n", "ok.yml")])
    assert args.deepspeed_config()["gradient_clipping"] == 0.0


# ---------------------------------------------------- row 24: what torch's Adam refuses, refused first


@pytest.mark.parametrize("extra, fragments", [
    ("    betas: [0.9, 1.5]\n", ["FILE:9: optimizer.params.betas[1]: must lie in [0, 1)", "got 1.5"]),
    ("    betas: [-0.1, 0.99]\n", ["FILE:9: optimizer.params.betas[0]: must lie in [0, 1)", "got -0.1"]),
    ("    betas: [0.9, 1]\n", ["FILE:9: optimizer.params.betas[1]: must lie in [0, 1)"]),
    ("    betas: 0.9\n", ["FILE:9: optimizer.params.betas: must be two numbers [beta1, beta2]", "got 0.9"]),
    ("    betas: [0.9, 0.95, 0.99]\n", ["FILE:9: optimizer.params.betas: must be two numbers"]),
    ("    betas: [0.9, yes]\n", ["FILE:9: optimizer.params.betas: must be two numbers"]),
    ("    eps: -1.0e-8\n", ["FILE:9: optimizer.params.eps: must be >= 0", "got -1e-08"]),
    ("    eps: [1]\n", ["FILE:9: optimizer.params.eps must be a number"]),
    ("    weight_decay: 0.0\n", ["FILE:9: optimizer.params.weight_decay: is 0.0, but the optimizer takes its decay "
                               "from weight-decay (0.1)"]),
    ("    momentum: 0.9\n", ["FILE:9: optimizer.params.momentum: is not an optimizer parameter here",
                           "lr, betas, eps, weight_decay"]),
])
def test_optimizer_params_torch_would_refuse_are_refused_with_their_path_and_line(extra, fragments, tmp_path):
    refused(tmp_path, BASE + OPTIMIZER + extra, *fragments)


def test_negative_weight_decay_is_refused(tmp_path):
    refused(tmp_path, BASE + "weight-decay: -0.1\n", "FILE:5: weight-decay: must be >= 0", "got -0.1")


def test_good_optimizer_params_pass(tmp_path):
    path = write(tmp_path, BASE + OPTIMIZER + "    betas: [0, 0.999]\n    eps: 0\n    weight_decay: 0.1\n")
    params = NeoXArgs.from_ymls([path]).optimizer["params"]
    assert params == {"lr": 1.0e-3, "betas": [0, 0.999], "eps": 0.0, "weight_decay": 0.1}


# ------------------------------------------------- rows 14, 22: eval.py's keys: 0 is not "unset"
@pytest.mark.parametrize("line, fragments", [
    ("eval-task-length: 0", ["FILE:5: eval-task-length: must be a positive number of tokens", "got 0",
                             "leave it unset (null); 0 does not mean that"]),
    ("eval-task-length: -5", ["FILE:5: eval-task-length: must be a positive number of tokens", "got -5"]),
    ("eval-task-num-fewshot: -3", ["FILE:5: eval-task-num-fewshot: must be >= 0", "got -3"]),
    ("eval-task-limit: 0", ["FILE:5: eval-task-limit: must be a whole number of documents per task (>= 1) "
                            "or a fraction of them in (0, 1)", "got 0.0", "Leave it unset (null)"]),
    ("eval-task-limit: -2", ["FILE:5: eval-task-limit: must be", "got -2.0"]),
    ("eval-task-limit: 2.5", ["FILE:5: eval-task-limit: must be", "got 2.5"]),
])
def test_eval_task_keys_out_of_range_are_refused(line, fragments, tmp_path):
    refused(tmp_path, BASE + line + "\n", *fragments)


@pytest.mark.parametrize("line, key, value", [
    ("eval-task-length: 1", "eval_task_length", 1), ("eval-task-num-fewshot: 0", "eval_task_num_fewshot", 0),
    ("eval-task-limit: 0.5", "eval_task_limit", 0.5), ("eval-task-limit: 20", "eval_task_limit", 20.0),
    ("eval-task-limit: null", "eval_task_limit", None),
])
def test_eval_task_keys_in_range_pass(line, key, value, tmp_path):
    assert getattr(NeoXArgs.from_ymls([write(tmp_path, BASE + line + "\n")]), key) == value


# -------------------------------------------------- row 26: paths the filesystem cannot hold
@pytest.mark.parametrize("key", ["save", "eval-results-dir", "log-dir", "sample-output-file", "vocab-file"])
def test_a_folder_name_longer_than_the_filesystem_allows_is_refused(key, tmp_path):
    long = tmp_path / ("d" * 300) / "x"
    refused(tmp_path, BASE + f"{key}: {long}\n", f"FILE:5: {key}: the name 'ddddd", "is 300 bytes long",
            f"more than the {os.pathconf(tmp_path, 'PC_NAME_MAX')} the filesystem allows", "(NAME_MAX)")
    assert not any(p.name.startswith("ddd") for p in tmp_path.iterdir())  # nothing was made


def test_a_whole_path_longer_than_path_max_is_refused(tmp_path):
    deep = "/".join(["p" * 200] * 25)  # every name fits, the whole does not
    refused(tmp_path, BASE + f"save: {tmp_path}/{deep}\n", "FILE:5: save: ", "more than the 4095",
            "(PATH_MAX)", "...(cut)")


def test_a_dataset_prefix_counts_the_files_suffix_and_list_entries_name_their_index(tmp_path):
    prefix = tmp_path / ("p" * 252)  # 256 bytes with ".bin"
    refused(tmp_path, BASE + f"train-data-paths:\n  - {tmp_path}/ok\n  - {prefix}\n",
            "FILE:7: train-data-paths[1]: the name", "is 256 bytes long (with the .bin the files get)")
    NeoXArgs.from_ymls([write(tmp_path, BASE + f"data-path: {tmp_path / ('p' * 251)}\n", "ok.yml")])


def test_a_path_with_a_nul_byte_or_an_empty_path_is_refused(tmp_path):
    refused(tmp_path, BASE + 'save: "a\\0b"\n', "FILE:5: save: 'a\\x00b' contains a NUL byte")
    refused(tmp_path, BASE + 'eval-results-dir: ""\n', "FILE:5: eval-results-dir: is empty")
    refused(tmp_path, BASE + 'eval-task-paths: [tasks, 3]\n', "FILE:5: eval-task-paths[1]: must be a path")


def test_usual_paths_pass(tmp_path):
    args = NeoXArgs.from_ymls([write(tmp_path, BASE + f"save: {tmp_path}/ckpt\nload: relative/dir\n")])
    assert args.save == f"{tmp_path}/ckpt"


# ---------------------------------------------- found on the way: values that ended in a traceback
@pytest.mark.parametrize("line, fragments", [
    ("pos-emb: [alibi]", ["FILE:5: pos-emb must be a string, got ['alibi']"]),
    ("optimizer: {type: Adam, params: [1, 2]}", ["FILE:5: optimizer.params: must be a mapping", "got [1, 2]"]),
    ("deepspeed_extra_args: {x: " + "[" * 5000 + "]" * 5000 + "}", ["nests lists or mappings too deeply"]),
])
def test_values_of_the_wrong_shape_are_one_paragraph(line, fragments, tmp_path):
    refused(tmp_path, BASE + line + "\n", *fragments)


def test_nested_lines_survive_the_trip_to_the_ranks_and_a_nested_set(tmp_path):
    from megatron.neox_arguments import decode_config, encode_config, parse_overrides
    path = write(tmp_path, BASE + OPTIMIZER + "    betas: [0.9, 0.95]\n")
    args = NeoXArgs.from_ymls([path], parse_overrides(["optimizer.params.lr=2.0e-3"]))
    assert args.where("optimizer.params.lr") == "command line"
    assert args.where("optimizer.params.betas[1]") == f"{path}:9"
    payload = decode_config(encode_config(args))
    again = NeoXArgs.from_dict(payload["values"], payload["sources"], payload["config_files"])
    assert again.where("optimizer.params.betas[1]") == f"{path}:9" and again.lr == 2.0e-3
    with pytest.raises(NeoXArgsError, match=r"^command line: optimizer.params.betas\[1\]: must lie in \[0, 1\)"):
        NeoXArgs.from_ymls([path], parse_overrides(["optimizer.params.lr=2.0e-3", "optimizer.params.betas=[0.9, 1.5]"]))


@pytest.mark.parametrize("case", ["nested-repeat", "long-name"])
def test_deepy_dry_run_prints_one_paragraph_and_no_traceback(case, tmp_path, monkeypatch, capsys):
    text, fragments = {
        "nested-repeat": (BASE + OPTIMIZER + "    lr: 5.0\n", ["line 9: key 'optimizer.params.lr' is given twice"]),
        "long-name": (BASE + f"save: {tmp_path / ('s' * 300)}\n", [":5: save: the name 'sss", "(NAME_MAX)"]),
    }[case]
    done = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", write(tmp_path, text), "--dry-run")
    assert_clear_error(done, *fragments, alone=True)
