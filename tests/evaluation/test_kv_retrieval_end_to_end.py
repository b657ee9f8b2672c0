"""`python deepy.py train.py configs/tiny.yml` with kv-retrieval mixed into half the training samples,
then `python evaluate.py configs/tiny.yml configs/eval/kv_retrieval.yml`: the printed grid, the
record's fields, the heatmap beside the result file; and the one-message error of a training task
that does not fit seq-length."""
import json

import pytest
from tests.support.training import TINY, free_port, run_script, set_flags, tiny_overrides

KV = TINY.parent / "eval" / "kv_retrieval.yml"
MIX = {"probe_train_task": "kv-retrieval", "probe_train_fraction": 0.5}


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kv")
    values = tiny_overrides(stdlib_data, folder, **MIX)
    done = run_script(["deepy.py", "train.py", str(TINY), *set_flags(values),
                       *set_flags({"num_gpus": 1, "master_port": free_port()})])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder, values


def test_evaluate_prints_the_grid_writes_the_record_and_the_heatmap(trained):
    folder, values = trained
    flags = set_flags({"data_path": values["data_path"], "split": values["split"], "load": values["load"],
                       "eval_results_dir": str(folder / "results"), "probe_samples": 2, **MIX})
    done = run_script(["evaluate.py", str(TINY), str(KV), *flags,
                       "--set", "eval-lengths=[64, 128]", "--set", "probe-depths=[0.0, 1.0]"])
    assert done.returncode == 0, done.stderr[-3000:]
    for length in (64, 128):
        assert f"kv-retrieval L={length} greedy accuracy by depth  0:" in done.stdout
    (result,) = (folder / "results").glob("*.json")
    records = json.loads(result.read_text())["results"]
    assert [(r["length"], r["mode"]) for r in records] == [(64, "kv-retrieval"), (128, "kv-retrieval")]
    for record in records:
        assert record["probe_depths"] == [0.0, 1.0] and record["probe_samples"] == 2 and record["chunks"] == 4
        assert len(record["probe_logprob"]) == len(record["probe_rank"]) == len(record["probe_top1"]) == 4
        assert len(record["probe_greedy_exact"]) == len(record["chunk_losses"]) == 4
        assert all(1000 <= key <= 9999 for key in record["probe_keys"]) and record["tokens"] == 4 * 4
        for field in ("depth_accuracy", "depth_top1", "depth_logprob", "depth_rank"):
            assert len(record[field]) == 2
        assert all(0 <= a <= 1 for a in record["depth_accuracy"]) and all(lp < 0 for lp in record["probe_logprob"])
    # Paired: the same prompts whatever the run, so the keys at 64 are those of any other run at 64.
    assert records[0]["probe_keys"] != records[1]["probe_keys"]
    assert result.with_name(result.stem + "_kv-retrieval.png").is_file()
    assert not result.with_name(result.stem + "_passkey.png").exists()



MINI = TINY.parent / "reproduce" / "mini.yml"
WINDOW = 64  # = the training length


@pytest.fixture(scope="module")
def retriever(stdlib_data, tmp_path_factory):
    """configs/reproduce/cpu-mini-retrieval.yml's recipe, shortened: ALiBi (the quickest learner in its
    pilots) trained on one-pair kv-retrieval prompts of 64 tokens."""
    folder = tmp_path_factory.mktemp("retriever")
    values = {"data_path": stdlib_data, "split": "90,8,2", "tokenizer_type": "ByteLevelTokenizer", "pos_emb": "alibi",
              "seed": 1235, "save": str(folder / "ckpt"), "load": str(folder / "ckpt"), "train_iters": 1500,
              "eval_interval": 100000, "data_cache_path": str(folder / "cache"), "tensorboard_dir": None,
              "probe_train_task": "kv-retrieval", "probe_train_fraction": 1.0, "probe_train_kv_pairs": 1}
    done = run_script(["deepy.py", "train.py", str(MINI), *set_flags(values),
                       *set_flags({"num_gpus": 1, "master_port": free_port()})])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder, values


def probe_hits(folder, values, window):
    """(hits, probe_distance) of every prompt at 64 and 256 tokens, evaluated with attention-window `window`."""
    results = folder / f"results_{window}"
    flags = set_flags({**values, "eval_results_dir": str(results), "eval_split": "valid", "probe_kv_pairs": 1,
                       "probe_samples": 8, **({"attention_window": window} if window else {})})
    done = run_script(["evaluate.py", str(MINI), *flags, "--set", "eval-lengths=[64, 256]",
                       "--set", "eval-modes=[kv-retrieval]", "--set", "probe-depths=[0.0, 0.5, 1.0]"])
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = results.glob("*.json")
    records = json.loads(result.read_text())["results"]
    hits = [h for r in records for h in r["probe_greedy_exact"]]
    distances = [d for r in records for d in r["probe_distance"]]
    return hits, distances


def test_past_its_window_a_windowed_model_falls_to_chance_and_the_full_one_still_retrieves(retriever):
    """Issue 15's falsifiable prediction, end to end: a needle at least W tokens before the question is
    invisible to the model windowed at W (accuracy at chance, 1e-4 for 4 digits), while the same
    checkpoint without the window, which uses context past its training length, still finds it."""
    folder, values = retriever
    full, distances = probe_hits(folder, values, None)
    windowed, same = probe_hits(folder, values, WINDOW)
    assert distances == same  # the same prompts (paired)
    far = [i for i, d in enumerate(distances) if d >= WINDOW]
    near = [i for i, d in enumerate(distances) if d < WINDOW]
    assert len(far) >= 16 and len(near) >= 16
    mean = lambda hits, which: sum(hits[i] for i in which) / len(which)  # noqa: E731
    assert mean(full, near) >= 0.75 and mean(windowed, near) >= 0.75  # it learned the task
    assert mean(windowed, far) <= 0.05  # falls to chance
    assert mean(full, far) >= 0.5  # keeps it
