"""The methods whose attention takes a path of its own (a Toeplitz bias, written-out scores, a replaced
softmax, per-token gates, Householder key transforms, DAPE's score edit) train through train.py and evaluate
at 4x the training length through evaluate.py: all of them in one model, one layer each (`layer-pattern`),
so two processes check what one training and one evaluation per method checked. Each layer is planned on
its own (the dry run's "Attention" lines name one strategy per positional module), so each method runs the
path it runs alone; its numbers against references are its own file's in-process tests."""
import json
import math
import re

from tests.support.training import run_script, set_flags, tiny_overrides

# One entry per layer: the method and the options its own end-to-end test trained it with. A method whose
# attention runs a path no entry here runs adds its entry (not a launch test of its own).
LAYERS = [
    {"pos-emb": "sandwich"},
    {"pos-emb": "path"},
    {"pos-emb": "cope", "cope-max-positions": 16},
    {"pos-emb": "stickbreaking"},
    {"pos-emb": "xpos", "xpos-scale-base": 64},
    {"pos-emb": "fox"},
    {"pos-emb": "cable"},
    {"pos-emb": "kerple_log", "dape": {"version": 1, "hidden": 16}},
    {"pos-emb": "kerple_log", "dape": {"version": 2, "hidden": 16}},
]
def test_every_layers_method_trains_and_evaluates_at_4x_through_the_entry_points(stdlib_data, tmp_path):
    """configs/tiny.yml (length 64) with one layer per entry of LAYERS, 10 steps through train.py, then
    evaluate.py at 1x, 2x and 4x; each loss below ln 258 (better than a uniform guess over the byte
    vocabulary), and the result file records each layer's method. The entry points run as one process, as
    `python train.py` does: going through deepy.py's launch (DeepSpeed's runner and launcher, tested by
    tests/e2e/run/test_deepy.py and tests/e2e/training/test_training.py) adds about 8 s a command and tests
    nothing of a method."""
    # 10 steps bring the evaluated losses to 4.78-4.87 (30 steps: 3.60-3.82), below ln 258 = 5.55 by 0.7.
    values = tiny_overrides(stdlib_data, tmp_path, num_layers=len(LAYERS), layer_pattern=LAYERS, train_iters=10,
                            log_interval=10, eval_results_dir=str(tmp_path / "results"))
    trained = run_script(["train.py", "configs/tiny.yml", *set_flags(values)], timeout=600)
    output = trained.stdout + trained.stderr
    assert trained.returncode == 0, output[-3000:]
    # the run's banner names each layer's method, in order: "pos-emb kerple_log + layers[sandwich, path, ...]"
    in_order = r"\W.*?".join(re.escape(layer["pos-emb"]) for layer in LAYERS)
    assert re.search(rf"pos-emb \S+ \+ layers\[{in_order}\W", output), output[-3000:]
    evaluated = run_script(["evaluate.py", "configs/tiny.yml",
                            *set_flags({**values, "eval_lengths": "[64,128,256]", "eval_chunks": 4})], timeout=600)
    output = evaluated.stdout + evaluated.stderr
    assert evaluated.returncode == 0, output[-3000:]
    losses = {int(n): float(loss) for n, loss in re.findall(r"L=(\d+) nonoverlap: loss ([\d.]+)", output)}
    assert sorted(losses) == [64, 128, 256] and all(v < math.log(258) for v in losses.values()), output
    (result,) = (tmp_path / "results").glob("*.json")
    recorded = json.dumps(json.loads(result.read_text())["run"])
    assert all(layer["pos-emb"] in recorded for layer in LAYERS), recorded
