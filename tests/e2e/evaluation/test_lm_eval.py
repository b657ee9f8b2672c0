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
from tests.support.training import REPO_ROOT, child_environment, tiny_args

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lm_eval  # noqa: E402
import transformers  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

from megatron.evaluation.context import ModeContext  # noqa: E402
from megatron.evaluation.lm_eval_adapter import NeoXLM  # noqa: E402
from megatron.evaluation.lm_eval_run import task_manager_for  # noqa: E402
from megatron.evaluation.modes import get_mode  # noqa: E402
from megatron.evaluation.run import EvaluationError  # noqa: E402
from tests.support.lm_eval import DOCUMENTS, MODEL, TASKS, run  # noqa: E402,F401 (`run`: the module fixture)

LENGTH = 256  # the adapter's max_length: 4x the training length of 64


def _evaluate(lm, run, tasks):
    from lm_eval.tasks import TaskManager
    manager = TaskManager(include_path=str(run["tasks"]), include_defaults=False)  # only the local tasks
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager,
                                   log_samples=True, bootstrap_iters=0, random_seed=0)
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
    context = ModeContext(lambda x, **loss: run["model"](x, **loss), stream, starts, length, neox_args.evaluation_run().settings,
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
def test_unknown_task_and_missing_checkpoint_are_clear_errors(run, tmp_path):
    neox_args = tiny_args("unused-data", tmp_path, eval_tasks=["local_mcq"], eval_task_paths=[str(run["tasks"])])
    with pytest.raises(EvaluationError, match=r"unknown lm-eval task\(s\) 'local_mcq' \(did you mean local_mc"):
        task_manager_for(neox_args.lm_eval_tasks())
    # eval.py's own code in this process (an eval.py launch imports lm-eval before it can refuse, ~10 s): how eval.py
    # prints such a refusal, exit 2 and one paragraph without a traceback, is
    # tests/e2e/hostile/test_hostile_round4.py::test_a_ruler_length_nothing_could_score_is_refused_before_lm_eval_builds_it.
    from megatron.evaluation.lm_eval_run import evaluate_tasks
    from megatron.neox_arguments import NeoXArgs
    missing = NeoXArgs.from_ymls([run["config"]], {"eval_tasks": ["local_mc"], "eval_task_paths": [str(run["tasks"])],
                                                   "load": str(tmp_path / "none")})
    with pytest.raises(EvaluationError, match=f"{tmp_path / 'none'}.* does not exist"):
        evaluate_tasks(missing.evaluation_run(), missing.lm_eval_tasks())
