"""Hostile inputs, round 3 (issue 40): the rows about runs, results and config values -- an empty loss
mask is not a loss of zero, a NaN result is not a result, a step is the one its folder names, config
values are checked before anything is allocated from them, every message quotes at most 200
characters, a link loop is called one. evaluate.py's and generate.py's runs here are their own main in this
process (tests/support/hostile.py entry_point_in_process), but for one launch of evaluate.py (a checkpoint that
contradicts itself) which shows such a refusal reaching the terminal."""
import os
import shutil

import numpy as np
import pytest

from tests.support.hostile import assert_clear_error
from tests.support.training import REPO_ROOT, TINY, set_flags, tiny_args
from tests.support.hostile import entry_point_in_process, evaluate, evaluate_in_process, script, train


def eod_only_data(folder):
    """A dataset whose every token is the end-of-document token (40 documents of 100)."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from megatron.tokenizer import make_tokenizer

    eod = make_tokenizer("ByteLevelTokenizer", None, None).eod
    prefix = folder / "eod_text_document"
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=np.uint16)
    for _ in range(40):
        builder.add_document(np.full(100, eod, dtype=np.uint16), [100])
    builder.finalize(str(prefix) + ".idx")
    return str(prefix)


@pytest.mark.parametrize("masking", [{}, {"reset_attention_mask": True}], ids=["eod-mask-loss", "with document masking"])
def test_an_empty_loss_mask_is_an_error_not_a_loss_of_zero(masking, tmp_path):
    result = train(eod_only_data(tmp_path), tmp_path, eod_mask_loss=True, **masking)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "loss 0.0000" not in result.stdout
    assert ("error: every token of a training step's global batch is masked out of the loss (eod-mask-loss masks "
            "every end-of-document token") in result.stderr
    assert not (tmp_path / "ckpt" / "latest").exists()


# ------------------------------------------------------------------- checkpoints: step and weights
# train.py's checkpoint of configs/tiny.yml, trained once per test run (tests/e2e/conftest.py) and only read here:
# a test that changes it changes a copy.
STEP = "global_step4"  # trained_tiny's one checkpoint


@pytest.fixture(scope="module")
def trained(trained_tiny):
    return trained_tiny


def copied(trained, tmp_path):
    import shutil
    shutil.copytree(trained, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_a_step_is_the_one_its_folder_names(trained, tmp_path, monkeypatch, capsys):
    ckpt = copied(trained, tmp_path)
    (ckpt / STEP).rename(ckpt / "global_step600")
    (ckpt / "latest").write_text("global_step600")
    resolved = ckpt / "global_step600" / "resolved_config.yml"
    result = evaluate_in_process(monkeypatch, capsys, resolved, load=str(ckpt),
                                 eval_results_dir=str(tmp_path / "results"))
    assert_clear_error(result, f"{ckpt / 'global_step600'} is the folder of step 600, but its model-states file "
                               "says iteration 4")
    assert not list(tmp_path.rglob("*.json"))


def test_weights_holding_nan_are_refused_not_scored(trained, tmp_path, monkeypatch, capsys):
    import torch
    ckpt = copied(trained, tmp_path)
    path = ckpt / STEP / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    name = next(k for k, v in state["module"].items() if v.is_floating_point())
    state["module"][name][0] = float("nan")
    torch.save(state, path)
    result = evaluate_in_process(monkeypatch, capsys, ckpt / STEP / "resolved_config.yml", load=str(ckpt),
                                 eval_results_dir=str(tmp_path / "results"))
    assert_clear_error(result, f"the weights in {ckpt / STEP} hold NaN or inf (['{name}'])")
    assert not list((tmp_path).rglob("*.json"))


def test_finite_weights_that_overflow_to_a_nan_loss_are_not_written_as_a_result(trained, tmp_path, monkeypatch,
                                                                                 capsys):
    """Row 11, the other way to a NaN result: every weight finite (so loading accepts them), but the
    embedding at 1e38 overflows float32 in the first layer; the loss is NaN or inf, and never a result."""
    import torch
    ckpt = copied(trained, tmp_path)
    path = ckpt / STEP / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    name = next(k for k in state["module"] if "word_embeddings" in k)
    state["module"][name].fill_(1e38)
    torch.save(state, path)
    result = evaluate_in_process(monkeypatch, capsys, ckpt / STEP / "resolved_config.yml", load=str(ckpt),
                                 eval_results_dir=str(tmp_path / "results"))
    message = assert_clear_error(result, "L=64 nonoverlap: the loss is ", ", not a result (NaN/inf logits",
                                 "nothing was written")
    assert message.split("the loss is ")[1].split(",")[0] in ("nan", "inf")
    assert not list(tmp_path.rglob("*.json"))


def test_a_model_config_that_is_not_a_mapping_or_names_an_unknown_method_blames_the_checkpoint(trained, tmp_path,
                                                                                              stdlib_data, monkeypatch,
                                                                                              capsys):
    import torch
    ckpt = copied(trained, tmp_path)
    path = ckpt / STEP / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    for record, fragment in (([1, 2], "'it is a list, not a mapping of config keys'"),
                             ({**state["model_config"], "pos_emb": "bogus"}, "unknown positional embedding 'bogus'")):
        torch.save({**state, "model_config": record}, path)
        result = evaluate_in_process(monkeypatch, capsys, TINY, load=str(ckpt), data_path=stdlib_data,
                                     eval_results_dir=str(tmp_path / "r"))
        message = assert_clear_error(result, f"the checkpoint {ckpt / STEP} records a model_config this "
                                             "project cannot read (", fragment)
        assert "Set `pos-emb`" not in message


def test_a_huge_latest_is_quoted_in_200_characters(trained, tmp_path, stdlib_data, monkeypatch, capsys):
    ckpt = copied(trained, tmp_path)
    (ckpt / "latest").write_text("x" * 5_000_000)
    result = evaluate_in_process(monkeypatch, capsys, TINY, load=str(ckpt), data_path=stdlib_data,
                                 eval_results_dir=str(tmp_path / "r"))
    message = assert_clear_error(result, "should name a checkpoint folder like global_step100 but holds 'xxx")
    assert len(message) < 600


def test_a_link_loop_is_called_one(trained, tmp_path, stdlib_data, monkeypatch, capsys):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    loop = "is a symbolic link loop (ELOOP"
    result = evaluate_in_process(monkeypatch, capsys, TINY, load=str(tmp_path / "a"), data_path=stdlib_data,
                                 eval_results_dir=str(tmp_path / "r"))
    assert_clear_error(result, f"{tmp_path / 'a'} (key `load`) {loop}")
    assert_clear_error(script("tools/ckpts/convert_to_hf.py", "--input_dir", str(tmp_path / "a"), "--output_dir",
                              str(tmp_path / "hf")), f"--input_dir {tmp_path / 'a'} {loop}")
    ckpt = copied(trained, tmp_path)  # a step folder that is a loop
    os.symlink(ckpt / "global_step3", ckpt / "global_step3")
    result = evaluate_in_process(monkeypatch, capsys, TINY, load=str(ckpt), iteration=3, data_path=stdlib_data,
                                 eval_results_dir=str(tmp_path / "r"))
    assert_clear_error(result, f"has no checkpoint global_step3 (config key `iteration`) (global_step3 {loop}")


# ------------------------------------------------------------------------ config values, checked first
# (layer-pattern entries and numbers beyond float32: the config package refuses them,
# tests/hostile/test_hostile_round3.py)
def test_sizes_from_the_config_are_checked_before_anything_is_allocated(stdlib_data, tmp_path):
    # cope's table of 1e9 rows (64 GB) is counted by the memory check before the model is built.
    result = train(stdlib_data, tmp_path / "cope", pos_emb="cope", cope_max_positions=1_000_000_000)
    assert_clear_error(result, "this model cannot fit", "16,000,000,000 of the parameters are the positional "
                                                        "modules' (pos-emb cope), so lower the positional method's "
                                                        "sizes (e.g. cope-max-positions)")
    assert "step 1/" not in result.stdout
    # random-positions: 1e10 draws its positions without a permutation of 1e10 (80 GB): it trains.
    result = train(stdlib_data, tmp_path / "random", pos_emb="rotary", random_positions=10_000_000_000)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "random" / "ckpt" / "latest").read_text() == "global_step2"


def test_a_pickled_object_in_the_index_cache_is_named_not_loaded(stdlib_data, tmp_path):
    import shutil
    data = tmp_path / "data"
    shutil.copytree(os.path.dirname(stdlib_data), data, ignore=shutil.ignore_patterns("cache", "*.zst"))
    prefix = str(data / os.path.basename(stdlib_data))
    # The index cache a first train() of this data writes, built here as train.py builds it (its datasets alone).
    from megatron.data import build_train_valid_test_datasets
    from megatron.tokenizer import build_tokenizer
    first = tiny_args(prefix, tmp_path / "first", train_iters=2)
    build_train_valid_test_datasets(first.data_run(), build_tokenizer(first.tokenizer_run()))
    (cache,) = {p.parent for p in data.rglob("*-GPTDataset-train-document_index.npy")}
    target = next(cache.glob("*-GPTDataset-train-document_index.npy"))
    marker = tmp_path / "code-ran"
    np.save(target, np.array([Planted(marker)], dtype=object), allow_pickle=True)
    result = train(prefix, tmp_path / "second")
    assert not marker.exists()
    assert_clear_error(result, f"a sample-index cache file in {prefix}/cache/GPTDataset_indices is not a plain numpy "
                               "array", "Remove that cache folder")


class Planted:
    """Unpickling this calls os.makedirs(marker)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.makedirs, (self.marker,)


# ------------------------------------------------------------ row 16: a full disk under a result writer
from tests.support.hostile import full_disk  # noqa: E402,F401 (a fixture: a 3 MB tmpfs)


def fill(disk):
    """Fill the tmpfs to its last byte; creating an empty file (the start-up probe) still works."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_disk_that_fills_up_under_the_results_is_one_paragraph(trained, full_disk, tmp_path, stdlib_data,
                                                                  monkeypatch, capsys):
    fill(full_disk)
    resolved = trained / STEP / "resolved_config.yml"
    result = evaluate_in_process(monkeypatch, capsys, resolved, load=str(trained),
                                 eval_results_dir=str(full_disk / "results"))
    assert_clear_error(result, "the results (printed above) could not be written to "
                               f"{full_disk / 'results'}", "no space left on the device",
                       "(or set eval-results-dir to a folder on another disk)")
    assert "L=64 nonoverlap: loss" in result.stdout  # the scores are not lost
    result = entry_point_in_process(monkeypatch, capsys, "generate.py", resolved,
                                    REPO_ROOT / "configs" / "text_generation.yml", "--set", f"load={trained}",
                                    "--set", "maximum_tokens=4",
                                    "--set", f"sample-output-file={full_disk / 'samples.jsonl'}")
    assert_clear_error(result, "samples could not be written to", "no space left on the device",
                       "(or set sample-output-file to a folder on another disk)")


def test_a_checkpoint_that_contradicts_itself_says_so(trained, tmp_path):
    import torch
    ckpt = copied(trained, tmp_path)
    path = ckpt / STEP / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    state["model_config"]["num_layers"] = 3
    torch.save(state, path)
    resolved = ckpt / STEP / "resolved_config.yml"
    # A launch: evaluate.py's refusal of a checkpoint reaching the terminal (the others here run its main in-process).
    message = assert_clear_error(evaluate(resolved, load=str(ckpt), eval_results_dir=str(tmp_path / "r")),
                                 f"the checkpoint {ckpt / STEP} contradicts itself", "num-layers: checkpoint 3")
    assert "Load it with the config it was trained with" not in message  # the advice that repeats the error


def test_a_checkpoint_keeping_only_its_model_config_is_loaded_alike_by_every_entry_point(trained, tmp_path,
                                                                                       stdlib_data, monkeypatch,
                                                                                       capsys):
    """Row 26: no resolved_config.yml (as checkpoints before that file): every entry point builds the model
    its model_config records, as convert_to_hf does, and gets what the intact checkpoint gives; evaluate.py,
    which also needs the run's data (not recorded there), says so in one paragraph."""
    import json
    ckpt = copied(trained, tmp_path)
    (ckpt / STEP / "resolved_config.yml").unlink()
    shutil.rmtree(ckpt / STEP / "configs")
    eval_config = REPO_ROOT / "configs" / "eval" / "tiny.yml"
    message = assert_clear_error(evaluate_in_process(monkeypatch, capsys, eval_config, load=str(ckpt),
                                                     eval_results_dir=str(tmp_path / "r")),
                                 "no test data: set data-path", f"The model came from {ckpt / STEP}, "
                                 "which keeps no resolved_config.yml", "--set data-path=PREFIX")
    assert "give the run's own config files too" not in message
    scores = []
    for where, name in ((trained, "intact"), (ckpt, "model_config only")):
        result = evaluate_in_process(monkeypatch, capsys, eval_config, load=str(where), data_path=stdlib_data,
                                     split="90,8,2", eval_results_dir=str(tmp_path / name))
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        record = json.loads(next((tmp_path / name).glob("*.json")).read_text())
        scores.append([(r["length"], r["mode"], r["chunk_starts"], r["chunk_losses"]) for r in record["results"]])
    assert scores[0] == scores[1]
    samples = []
    for where, name in ((trained, "intact"), (ckpt, "model_config only")):
        result = entry_point_in_process(monkeypatch, capsys, "generate.py",
                                        REPO_ROOT / "configs" / "text_generation.yml", "--set", f"load={where}",
                                        "--set", "maximum_tokens=8",
                                        "--set", f"sample-output-file={tmp_path / name}.jsonl")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        samples.append([json.loads(line)["text"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()])
    assert samples[0] == samples[1] and len(samples[0]) == 2
    result = script("-m", "tools.analysis.plot_kernels", "--set", f"load={ckpt}", "--out", str(tmp_path / "k.png"))
    assert result.returncode == 0 and (tmp_path / "k.png").is_file(), result.stdout[-2000:] + result.stderr[-2000:]


def test_xpos_lengths_past_its_range_are_found_before_any_is_scored(stdlib_data, tmp_path, monkeypatch, capsys):
    assert train(stdlib_data, tmp_path, pos_emb="xpos", xpos_scale_base=1).returncode == 0
    resolved = tmp_path / "ckpt" / "global_step2" / "resolved_config.yml"
    result = evaluate_in_process(monkeypatch, capsys, resolved, load=str(tmp_path / "ckpt"), eval_lengths="[64, 128]",
                      eval_results_dir=str(tmp_path / "r"))
    message = assert_clear_error(result, "eval-lengths: [128] need positions past", "in float32",
                                 "nothing was scored")
    assert "Evaluate in float32" not in message and "L=64" not in result.stdout


# A run saving into the folder being evaluated moves `latest` on and prunes the step it named: the race is
# made exact (no timing) by an audit hook that does it at the moment the evaluator first opens a chosen file
# of that step (after reading `latest`, which named it) -- just before the file is really opened.
PRUNE_AT_OPEN = """
import os, runpy, shutil, sys
save, step, file, newest = sys.argv[1:5]
folder = os.path.join(save, step)
pruned = []
def prune(event, args):
    if event != "open" or pruned or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    if os.path.abspath(os.fsdecode(args[0])) == os.path.join(folder, file):
        pruned.append(True)
        # as train.py with keep-last-n-checkpoints: `latest` moves on, the old step goes
        with open(os.path.join(save, "latest"), "w") as fh:
            fh.write(newest)
        shutil.rmtree(folder)
sys.addaudithook(prune)
sys.argv = sys.argv[5:]
sys.path[0:1] = [os.getcwd(), os.path.dirname(os.path.abspath(sys.argv[0]))]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def two_steps(stdlib_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("two_steps")
    result = train(stdlib_data, folder, checkpoint_factor=1)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return folder / "ckpt"


def pruned_at_open(two_steps, tmp_path, file, *argv):
    """argv run while the save folder's `latest` names global_step1, which is pruned (and `latest` set to
    global_step2) when `file` of it is first opened."""
    ckpt = copied(two_steps, tmp_path)
    (ckpt / "latest").write_text("global_step1")
    return ckpt, script("-c", PRUNE_AT_OPEN, str(ckpt), "global_step1", file, "global_step2", *map(str, argv))


@pytest.mark.parametrize("file", ["resolved_config.yml", "mp_rank_00_model_states.pt"],
                         ids=["while the config is read", "while the weights are read"])
def test_evaluating_a_step_pruned_after_latest_named_it_evaluates_the_new_latest(two_steps, tmp_path, file):
    import json
    values = {"eval_lengths": "[64]", "eval_chunks": 2, "eval_results_dir": str(tmp_path / "r")}
    ckpt, result = pruned_at_open(two_steps, tmp_path, file, "evaluate.py", REPO_ROOT / "configs" / "eval" / "tiny.yml",
                                  "--set", f"load={tmp_path / 'ckpt'}", *set_flags(values))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (ckpt / "global_step1").exists()  # the race took place
    record = json.loads(next((tmp_path / "r").glob("*.json")).read_text())
    assert record["run"]["checkpoint_step"] == 2 and "step 2)" in result.stdout


def test_a_step_the_user_named_pruned_while_read_is_called_pruned(two_steps, tmp_path):
    values = {"load": str(tmp_path / "ckpt"), "iteration": 1, "eval_lengths": "[64]", "eval_chunks": 2,
              "eval_results_dir": str(tmp_path / "r")}
    ckpt, result = pruned_at_open(two_steps, tmp_path, "mp_rank_00_model_states.pt", "evaluate.py",
                                  REPO_ROOT / "configs" / "eval" / "tiny.yml", *set_flags(values))
    message = assert_clear_error(result, f"{ckpt / 'global_step1'} was removed while it was being read: the run "
                                         f"writing {ckpt} keeps only its newest checkpoints (keep-last-n-checkpoints)",
                                 "Run again to load the newest ('global_step2')")
    assert "damaged" not in message and not list((tmp_path / "r").rglob("*.json"))


def test_inference_load_of_a_save_folder_pruned_while_read_loads_the_new_latest(two_steps, tmp_path):
    """inference_model.load(<save folder>) with no config: it named a config key `iteration` nobody set. Without
    a config, load builds the model from the checkpoint's record and never opens resolved_config.yml: the
    weights are the file it reads, so the race is run there."""
    (tmp_path / "load_latest.py").write_text("import sys\nfrom megatron.checkpoint.inference_model import load\n"
                                             "print('loaded step', load(sys.argv[1]).step)\n")
    ckpt, result = pruned_at_open(two_steps, tmp_path, "mp_rank_00_model_states.pt", tmp_path / "load_latest.py",
                                  tmp_path / "ckpt")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (ckpt / "global_step1").exists()  # the race took place
    assert "loaded step 2" in result.stdout and "iteration" not in result.stderr


# -------------------------------------------------------------------- the flex kernel's compile folder
@pytest.mark.parametrize("where", ["a file", "a full disk"])
def test_an_unwritable_inductor_folder_is_one_paragraph_before_anything_compiles(where, trained, tmp_path,
                                                                                  stdlib_data, request, monkeypatch,
                                                                                  capsys):
    if where == "a file":
        folder = tmp_path / "not-a-folder"
        folder.write_text("a file")
    else:
        disk = request.getfixturevalue("full_disk")
        fill(disk)
        folder = disk / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder))  # run_cli checks it before the entry point's main
    result = evaluate_in_process(monkeypatch, capsys, TINY, eval_chunks=2, load=str(trained), data_path=stdlib_data,
                                 eval_results_dir=str(tmp_path / "r"), attention_impl="flex")
    message = assert_clear_error(result, f"TORCHINDUCTOR_CACHE_DIR='{folder}' cannot be written")
    assert "'auto' or 'blocked'" in message and not list((tmp_path / "r").rglob("*.json"))
