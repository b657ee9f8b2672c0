"""eval.py and the lm-eval adapter on tasks defined here (no internet): the adapter's answers equal
lm-eval's own HFLM running the exported model, `loglikelihood_rolling` equals evaluate.py's `sliding`
mode on the same tokens, eval.py prints the table and writes its JSON, bad input is one clear error."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_training_support import REPO_ROOT, child_environment, tiny_args

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lm_eval  # noqa: E402
import transformers  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

from megatron.checkpoint.checkpointing import load_model_weights, save_checkpoint  # noqa: E402
from megatron.evaluation.context import ModeContext  # noqa: E402
from megatron.evaluation.lm_eval_adapter import NeoXLM  # noqa: E402
from megatron.evaluation.lm_eval_run import task_manager_for  # noqa: E402
from megatron.evaluation.modes import get_mode  # noqa: E402
from megatron.evaluation.run import EvaluationError  # noqa: E402
from megatron.run.initialize import initialize_megatron  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer  # noqa: E402
from megatron.training.loop import setup_model_and_optimizer  # noqa: E402
from tools.ckpts.hf_export import export_checkpoint  # noqa: E402

LENGTH = 256  # the adapter's max_length: 4x the training length of 64
# Padded vocabulary == tokenizer vocabulary (258 byte-level ids), so HFLM's softmax over every row of
# the output layer and the adapter's over the tokenizer's vocabulary are the same distribution.
MODEL = dict(hidden_size=32, num_attention_heads=2, make_vocab_size_divisible_by=2)
QUESTIONS = [("The capital of France is", [" Paris", " Berlin", " Rome"], 0),
             ("Two plus two equals", [" four", " five"], 0),
             ("Grüße aus", [" Köln", " Wien", " Zürich"], 2)]
DOCUMENTS = ["def add(a, b):\n    return a + b\n", "Längere Sätze über Straßen und Flüsse — naïve café.",
             "import os\nprint(os.getcwd())\n" * 3]
TASKS = {
    "local_mc": ("mc.jsonl", "output_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
                 "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n"),
    "local_rolling": ("docs.jsonl", "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
                      "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n"),
    "local_gen": ("mc.jsonl", "output_type: generate_until\ndoc_to_text: '{{question}}'\n"
                  "doc_to_target: '{{choices[answer]}}'\ngeneration_kwargs:\n  until: ['\\n']\n  max_gen_toks: 6\n"
                  "  do_sample: false\nmetric_list:\n  - metric: exact_match\n"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A kerple_log checkpoint (step 2), its config, its export, and a folder of local tasks."""
    root = tmp_path_factory.mktemp("lm_eval")
    args = tiny_args("unused-data", root, eval_results_dir=str(root / "results"), **MODEL)
    initialize_megatron(args)
    save_checkpoint(args, setup_model_and_optimizer(args, build_tokenizer(args).padded_vocab_size)[0], 2, 32)
    config = root / "run.yml"
    config.write_text(json.dumps({"num-layers": 2, "hidden-size": 32, "num-attention-heads": 2, "seq-length": 64,
                                  "pos-emb": "kerple_log", "no-weight-tying": True, "make-vocab-size-divisible-by": 2,
                                  "tokenizer-type": "ByteLevelTokenizer", "train_micro_batch_size_per_gpu": 1,
                                  "load": str(root / "ckpt"), "eval-results-dir": str(root / "results")}))
    export_checkpoint(root / "ckpt" / "global_step2", root / "hf", [config])
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "mc.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n"
                                            for q, c, a in QUESTIONS))
    (tasks / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCUMENTS))
    for name, (data, body) in TASKS.items():
        (tasks / f"{name}.yaml").write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                            f"    test: {tasks / data}\ntest_split: test\n{body}")
    model = GPTModel(model_config(args, build_tokenizer(args).padded_vocab_size)).eval()
    load_model_weights(args, model)
    return {"root": root, "config": config, "tasks": tasks, "model": model, "tokenizer": build_tokenizer(args)}


def _evaluate(lm, run, tasks):
    from lm_eval.tasks import TaskManager
    manager = TaskManager(include_path=str(run["tasks"]), include_defaults=False)  # only the local tasks
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager,
                                   log_samples=True, bootstrap_iters=0, random_seed=0)


@pytest.mark.launches
def test_adapter_answers_equal_hflm_on_the_exported_model(run):
    torch.set_num_threads(1)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(run["root"] / "hf", trust_remote_code=True).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(run["root"] / "hf", trust_remote_code=True)
    reference = HFLM(pretrained=hf_model, tokenizer=hf_tokenizer, max_length=LENGTH, batch_size=1, device="cpu")
    ours = NeoXLM(run["model"], run["tokenizer"], max_length=LENGTH)
    tasks = list(TASKS)
    theirs, mine = _evaluate(reference, run, tasks), _evaluate(ours, run, tasks)
    for task in tasks:
        for a, b in zip(mine["samples"][task], theirs["samples"][task], strict=True):
            for x, y in zip(a["resps"], b["resps"], strict=True):
                if task == "local_gen":
                    assert x == y  # the same greedy text
                else:
                    assert np.allclose(np.asarray(x[0], dtype=float), np.asarray(y[0], dtype=float), atol=1e-4, rtol=1e-5)
        assert mine["results"][task].keys() == theirs["results"][task].keys()


@pytest.mark.launches
def test_rolling_loglikelihood_equals_the_sliding_mode_on_the_same_tokens(run):
    """A document of 3 windows and a half, stride L/4: every token after the first window is scored
    with at least 3/4 L of context, exactly as evaluate.py's sliding mode scores the stream."""
    length, stride = 32, 8
    tokens = run["tokenizer"].tokenize(DOCUMENTS[2] * 3)[: 3 * length + length // 2]
    adapter = NeoXLM(run["model"], run["tokenizer"], max_length=length, stride=stride)
    ours = adapter.rolling_token_losses(tokens)
    # evaluate.py's path: the sliding mode over the stream [eod] + document, chunks of L (the last one
    # whole, so it is cut from a longer stream: causality keeps the later tokens out).
    stream = np.asarray([run["tokenizer"].eod] + tokens + tokens[: length], dtype=np.int64)
    starts = np.arange(4, dtype=np.int64) * length
    neox_args = tiny_args("unused-data", run["root"], eval_stride=stride, **MODEL)
    context = ModeContext(lambda x, **loss: run["model"](x, **loss), stream, starts, length, neox_args,
                          run["tokenizer"].vocab_size)
    context.mode = "sliding"
    with torch.inference_mode():  # as evaluate.py runs its modes
        record = get_mode("sliding").score(context)
    per_token = np.asarray(context._passes["sliding"][0]).reshape(-1)[: len(tokens)]
    assert record["stride"] == stride
    np.testing.assert_allclose(ours, per_token, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(record["chunk_losses"])[:3], per_token[: 3 * length].reshape(3, -1).mean(1),
                               rtol=1e-5)
    from lm_eval.api.instance import Instance
    text = run["tokenizer"].detokenize(tokens)
    assert run["tokenizer"].tokenize(text) == tokens
    rolling = adapter.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    assert rolling == pytest.approx(-per_token.astype(np.float64).sum(), rel=1e-6)


@pytest.mark.launches
def test_eval_py_prints_the_table_and_writes_json_beside_evaluate_results(run):
    done = subprocess.run([sys.executable, "eval.py", str(run["config"]), "--eval_tasks", "local_mc", "local_rolling",
                           "--set", f"eval-task-paths=[{run['tasks']}]", "--set", f"eval-task-length={LENGTH}"],
                          cwd=REPO_ROOT, env={**child_environment(), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "local_mc" in done.stdout and "|" in done.stdout and "word_perplexity" in done.stdout
    written = list((run["root"] / "results" / "lm_eval").glob("*.json"))
    assert len(written) == 1
    document = json.loads(written[0].read_text())
    assert document["evaluation"]["max_length"] == LENGTH and document["evaluation"]["limit"] is None
    assert set(document["results"]) == {"local_mc", "local_rolling"}


@pytest.mark.launches
def test_unknown_task_and_missing_checkpoint_are_clear_errors(run, tmp_path):
    neox_args = tiny_args("unused-data", tmp_path, eval_tasks=["local_mcq"], eval_task_paths=[str(run["tasks"])])
    with pytest.raises(EvaluationError, match=r"unknown lm-eval task\(s\) 'local_mcq' \(did you mean local_mc"):
        task_manager_for(neox_args)
    done = subprocess.run([sys.executable, "eval.py", str(run["config"]), "--eval_tasks", "local_mc",
                           "--set", f"eval-task-paths=[{run['tasks']}]", "--set", f"load={tmp_path / 'none'}"],
                          cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr
