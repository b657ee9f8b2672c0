"""RULER through eval.py (megatron/evaluation/ruler.py) and the effective length (tools/analysis/effective_length.py):
every sample lm-eval makes is as long as asked, measured with this project's tokenizer; the project's
scores are lm-eval's scoring of the generations; the effective length of a hand-worked example; data
that is not here is refused in one paragraph (eval.py's RULER results on a trained run, and the tools that print
them: tests/e2e/reproduce/test_reproduce_ruler.py)."""
import re
import subprocess
import sys

import numpy as np
import pytest
from tests.support.lm_eval import MODEL, run  # noqa: F401 (`run`: the module's checkpoint fixture)
from tests.support.training import REPO_ROOT, child_environment, tiny_args

from lm_eval.api.model import LM
from megatron.evaluation.ruler import RulerRun, go_offline, import_ruler_offline, ruler_manager
from megatron.tokenizer.hf_files import export_tokenizer

LENGTHS = [512, 1024]  # RULER's shortest niah_single_1 prompt is ~505 byte-level tokens with its 128-token reserve


@pytest.fixture(scope="module")
def tokenizer_folder(run, tmp_path_factory):  # noqa: F811
    folder = tmp_path_factory.mktemp("ruler_tokenizer")
    export_tokenizer(run["tokenizer"], folder)
    return str(folder)


def _docs(task: str, length: int, folder: str):
    go_offline()
    import_ruler_offline()
    loaded = ruler_manager({"tokenizer": folder, "max_seq_lengths": [length]}).load([task])["tasks"]
    task_object = loaded[task] if task in loaded else next(iter(loaded.values()))
    return list(task_object.test_docs()), task_object.config.generation_kwargs["max_gen_toks"]
@pytest.mark.parametrize("task,length", [("niah_single_1", 512), ("niah_multikey_2", 512), ("niah_multikey_3", 1024),
                                         ("ruler_fwe", 1024)])
def test_every_sample_is_as_long_as_asked_with_the_projects_tokenizer(run, tokenizer_folder,  # noqa: F811
                                                                      task, length):
    """lm-eval sizes a sample as its prompt's tokens + the answer reserve (the task's max_gen_toks) and keeps
    it when that is <= the length asked; its haystack grows in steps, so a sample falls short of the length
    by less than one step. Here the prompt is re-tokenized with this project's own tokenizer. (ruler_cwe
    takes ~80 s to make its 500 samples at 1,024 tokens on a busy core, so it is left out; ruler_vt is refused
    below 4,096, see test_tasks_whose_data_is_not_here_are_refused_in_one_paragraph.)"""
    tokenizer = run["tokenizer"]
    docs, reserve = _docs(task, length, tokenizer_folder)
    assert docs, (task, length)
    for doc in docs:
        ours = len(tokenizer.tokenize(doc["input"])) + reserve
        assert doc["max_length"] == length
        assert ours <= length
        if task.startswith("niah"):  # its sampler records the length it measured (with the exported folder)
            assert doc["length"] == ours
        # lm-eval keeps a sample within one step of its haystack (niah: 5 sentences or needles, fwe: words)
        assert ours > length / 2, (task, length, ours)
    if task == "niah_single_1":  # step = 5 repetitions of the 89-byte sentence and their newlines
        step = 5 * (len(tokenizer.tokenize("The grass is green. The sky is blue. The sun is yellow. Here we go. "
                                           "There and back again.")) + 1)
        assert min(len(tokenizer.tokenize(d["input"])) + reserve for d in docs) > length - step


class Retriever(LM):
    """An lm-eval model that answers every other niah prompt with its needle (read from the prompt) and
    the rest with a wrong number: scores that are neither all 0 nor all 1."""

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for i, request in enumerate(requests):
            needle = re.search(r"is: (\d+)\.", request.args[0]).group(1)
            out.append(f" {needle}." if i % 2 == 0 else " 1234567.")
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError
def test_scores_and_intervals_are_lm_evals_scoring_of_the_generations(run, tmp_path):  # noqa: F811
    from lm_eval.tasks.ruler.common_utils import postprocess_pred
    args = tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": LENGTHS}, eval_task_limit=6)
    measured = RulerRun(args.lm_eval_tasks(), args.eval_seed, ["niah_single_1"]).evaluate(Retriever(), run["tokenizer"])
    for length in LENGTHS:
        record = measured["ruler"]["niah_single_1"][str(length)]
        samples = measured["samples"]["niah_single_1"][str(length)]
        # RULER's string_match_all written out: the share of the answers found in the stripped prediction
        predictions = [postprocess_pred([s["resps"][0][0]])[0].lower() for s in samples]
        again = [float(np.mean([a.lower() in p for a in s["doc"]["outputs"]])) for p, s in zip(predictions, samples)]
        assert record["scores"] == again and record["n"] == 6 and 0 < record["score"] < 1
        assert record["score"] == pytest.approx(measured["results"]["niah_single_1"][f"{length},none"], abs=1e-12)
        assert record["stderr"] == pytest.approx(measured["results"]["niah_single_1"][f"{length}_stderr,none"])
        assert record["stderr"] == pytest.approx(np.std(again, ddof=1) / np.sqrt(len(again)))
        assert record["ci95"][0] <= record["score"] <= record["ci95"][1]


def test_eval_py_refuses_a_ruler_task_whose_data_is_not_here_before_making_any(run, tmp_path):  # noqa: F811
    """eval.py's refusals, in one paragraph with status 2. (eval.py's RULER results on a trained run, and the
    ruler_table command and make_tables printing them: tests/e2e/reproduce/test_reproduce_ruler.py, whose sweep
    launches eval.py with RULER.)"""
    results = tmp_path / "results"
    base = [sys.executable, "eval.py", str(run["config"]), "--set", f"eval-results-dir={results}"]
    refused = subprocess.run(base + ["--eval_tasks", "niah_single_1", "ruler_qa_hotpot"], cwd=REPO_ROOT,
                             env=child_environment(), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "ruler_qa_hotpot cannot run here" in refused.stderr
    assert "Traceback" not in refused.stderr and "Generating" not in refused.stderr  # before any data is made
    # A config refusal happens while the config is read, before eval.py imports lm-eval: the same reading of the same
    # file and --set values in-process (the launch above shows how eval.py prints a refusal and exits).
    from megatron.errors import NeoXArgsError
    from megatron.neox_arguments import NeoXArgs
    with pytest.raises(NeoXArgsError, match=r"eval-task-metadata: sets tokenizer, but eval.py hands lm-eval the "
                                            r"run's own tokenizer"):
        NeoXArgs.from_ymls([str(run["config"])], {"eval-results-dir": str(results), "eval_tasks": ["niah_single_1"],
                                                  "eval-task-metadata": {"tokenizer": "gpt2"}})
