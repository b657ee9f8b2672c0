"""Hostile inputs, part 2, in this process: what train.py finds at start-up (before any data is read or any step is
spent) and data too small or damaged, each refused by train.py's own main as one paragraph with exit status 2
(tests/support/hostile.py entry_point_in_process). The launch that shows such a refusal reaching the terminal, a
folder made unwritable by chattr, and evaluate.py's refusals: tests/e2e/hostile/test_hostile_runs.py. Issue 17."""
import json

import pytest

from tests.support.hostile import assert_clear_error, train_in_process


def assert_no_training(result):
    assert "step 1/" not in result.stdout, result.stdout[-2000:]


# ------------------------------------------------------------------------------- start-up checks
def test_load_that_is_a_file_is_called_a_file_by_train_py(stdlib_data, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "ckpt-file"
    blocker.write_text("x")
    assert_clear_error(train_in_process(monkeypatch, capsys, stdlib_data, tmp_path, load=str(blocker)),
                       f"load {blocker} is a file, not a checkpoint folder")


@pytest.mark.parametrize("overrides, fragments", [
    ({"seq_length": "1e11"}, ["this model cannot fit", "activations of 16 sequence(s) of 100,000,000,000 tokens"]),
    ({"hidden_size": 1_000_000, "num_attention_heads": 1},
     ["this model cannot fit", "24,000,768,000,002 parameters x 16 bytes"]),  # + kerple_log's 2 (issue 40)
])
def test_a_model_that_cannot_fit_is_refused_up_front(overrides, fragments, stdlib_data, tmp_path, monkeypatch, capsys):
    result = train_in_process(monkeypatch, capsys, stdlib_data, tmp_path, **overrides)
    assert_clear_error(result, *fragments, "Lower hidden-size, num-layers, the sequence length")
    assert_no_training(result)


def test_fp16_on_a_device_without_it(stdlib_data, tmp_path, monkeypatch, capsys):
    from deepspeed.accelerator import get_accelerator
    if get_accelerator().is_fp16_supported():
        pytest.skip(f"{get_accelerator().device_name()} supports fp16")
    result = train_in_process(monkeypatch, capsys, stdlib_data, tmp_path, precision="fp16")
    assert_clear_error(result, "precision fp16 is not supported on this device (cpu). Use precision: fp32")


# ----------------------------------------------------------------------------------------- data
def _dataset(folder, text):
    from megatron.data.preprocess import preprocess
    from megatron.tokenizer import make_tokenizer

    (folder / "docs.jsonl").write_text(json.dumps({"text": text}) + "\n")
    preprocess([str(folder / "docs.jsonl")], str(folder / "small"), make_tokenizer("ByteLevelTokenizer", None, None),
               append_eod=True, show_progress=False)
    return str(folder / "small_text_document")


def test_a_corpus_shorter_than_one_sample_is_refused(tmp_path, monkeypatch, capsys):
    prefix = _dataset(tmp_path, "def f(x):\n    return x + 1\n")  # 27 bytes + EOD
    result = train_in_process(monkeypatch, capsys, prefix, tmp_path, split="100,0,0")
    assert_clear_error(result, f"the train split of {prefix} holds 28 tokens, fewer than one sample of 65")
    assert_no_training(result)


def test_an_empty_bin_beside_a_valid_idx_blames_the_bin(tmp_path, monkeypatch, capsys):
    prefix = _dataset(tmp_path, "some text " * 20)
    open(prefix + ".bin", "w").close()
    result = train_in_process(monkeypatch, capsys, prefix, tmp_path)
    assert_clear_error(result, f"{prefix}.bin is empty (0 bytes), but {prefix}.idx describes 1 documents")
    assert "AttributeError" not in result.stderr
