"""RULER through eval.py (megatron/evaluation/ruler.py) and the effective length (tools/analysis/effective_length.py):
every sample lm-eval makes is as long as asked, measured with this project's tokenizer; the project's
scores are lm-eval's scoring of the generations; the effective length of a hand-worked example; data
that is not here is refused in one paragraph; eval.py writes RULER results that make_tables prints."""
import argparse
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from tests.support.lm_eval import MODEL, run  # noqa: F401 (`run`: the module's checkpoint fixture)
from tests.support.training import REPO_ROOT, child_environment, tiny_args

from lm_eval.api.model import LM
from megatron.evaluation.identity import Method
from megatron.evaluation.ruler import RulerRun, go_offline, import_ruler_offline, refuse_unavailable, ruler_manager
from megatron.evaluation.run import EvaluationError
from megatron.tokenizer.hf_files import export_tokenizer
from tools.analysis.effective_length import Curve, effective_length, estimate

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


@pytest.mark.launches
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


def test_ruler_generation_goes_through_the_kv_cache(run):  # noqa: F811
    """What the model's forward sees during generate_until (the path RULER's tasks take): the prompt once
    (in chunks that add up to it), then one token per step, never the whole sequence again."""
    from lm_eval.api.instance import Instance
    from megatron.evaluation.lm_eval_adapter import NeoXLM
    lm = NeoXLM(run["model"], run["tokenizer"], max_length=2048)
    prompt = "The grass is green. The sky is blue. " * 40 + "One of the special magic numbers is: 1234567. What is it?"
    request = Instance(request_type="generate_until", doc={}, arguments=(prompt, {"max_gen_toks": 20, "until": []}),
                       idx=0)
    seen = []
    hook = run["model"].register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    try:
        lm.generate_until([request])
    finally:
        hook.remove()
    prefill = len(run["tokenizer"].tokenize(prompt))
    assert sum(seen[:-19]) == prefill and seen[-19:] == [1] * 19  # 20 new tokens: the last needs no step


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


@pytest.mark.launches
def test_scores_and_intervals_are_lm_evals_scoring_of_the_generations(run, tmp_path):  # noqa: F811
    from lm_eval.tasks.ruler.common_utils import postprocess_pred
    args = tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": LENGTHS}, eval_task_limit=6)
    measured = RulerRun(args, ["niah_single_1"]).evaluate(Retriever(), run["tokenizer"])
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


def test_effective_length_of_a_hand_worked_example():
    """Scores 0.80, 0.78, 0.70, 0.60, 0.75, 0.20 at 64 ... 2048 with threshold 0.85: 0.85 x 0.80 = 0.68, so 128
    (0.78) and 256 (0.70) keep it, 512 (0.60) does not: 256, though 1024 (0.75) would pass again.
    Perplexity 10, 10.5, 11.9, 12.5 with factor 1.2: the bound is 12, so 256 (11.9) is the last."""
    scores = dict(zip([64, 128, 256, 512, 1024, 2048], [0.80, 0.78, 0.70, 0.60, 0.75, 0.20]))
    assert effective_length(scores, 64, lower_is_better=False, threshold=0.85, ppl_factor=1.2) == 256
    assert effective_length(scores, 64, lower_is_better=False, threshold=0.70, ppl_factor=1.2) == 1024
    ppl = dict(zip([64, 128, 256, 512], [10.0, 10.5, 11.9, 12.5]))
    assert effective_length(ppl, 64, lower_is_better=True, threshold=0.85, ppl_factor=1.2) == 256
    assert effective_length({512: 0.0, 1024: 0.0}, 512, lower_is_better=False, threshold=0.85, ppl_factor=1.2) is None
    # The bootstrap: 20 samples per length, 0/1 scores with the shares above; every draw of a length whose
    # samples are all equal is that length's share, so only 128-512 move. With no sample at 64 (a task that
    # cannot be measured at the training length) the reference is the shortest length measured, 128.
    values = {n: {1: np.array([1.0] * round(20 * s) + [0.0] * (20 - round(20 * s)))} for n, s in scores.items()}
    e = estimate(Curve("task", Method("kerple_log", None, None), False, values, 64), 0.85, 1.2, draws=200)
    assert e["reference"] == 64 and e["effective"] == 256 and e["low"] <= 256 <= e["high"]
    del values[64]
    e = estimate(Curve("task", Method("kerple_log", None, None), False, values, 64), 0.85, 1.2, draws=200)
    assert e["reference"] == 128 and e["effective"] == 256  # 0.85 x 0.8 (16 of 20) = 0.68 <= 0.70; 0.60 fails


def test_tasks_whose_data_is_not_here_are_refused_in_one_paragraph(tmp_path):
    with pytest.raises(EvaluationError, match=r"ruler_qa_squad cannot run here: lm-eval 0.4.13 downloads its "
                       r"questions on every run .*rajpurkar.*the RULER tasks that need no data are niah_single_1"):
        refuse_unavailable(["niah_single_1", "ruler_qa_squad"])
    import nltk
    try:
        nltk.data.find("tokenizers/punkt_tab")
        pytest.skip("punkt_tab is installed here")
    except LookupError:
        pass
    with pytest.raises(EvaluationError, match=r"niah_single_2 build their haystack from Paul Graham's essays, and "
                       r"NLTK's punkt_tab .*(and the Hugging Face dataset baber/paul_graham_essays )?.*not on this "
                       r"machine .*nltk.download\('punkt_tab'\)"):
        refuse_unavailable(["niah_single_2"])


@pytest.fixture(scope="module")
def byte_level_hf(tmp_path_factory):
    """The Hugging Face tokenizer lm-eval sizes samples with, made from this project's byte-level tokenizer."""
    from megatron.tokenizer.tokenizer import ByteLevelTokenizer
    folder = tmp_path_factory.mktemp("byte_level")
    export_tokenizer(ByteLevelTokenizer(), folder)
    go_offline()
    import_ruler_offline()
    from lm_eval.tasks.ruler.common_utils import get_tokenizer
    return get_tokenizer(str(folder))


def test_word_and_variable_samplers_are_asked_before_lm_eval_and_agree_with_it(byte_level_hf):
    """ruler_fit.py says where lm-eval 0.4.13's cwe / fwe / vt samplers make no real sample; where it says so,
    lm-eval's own sampler makes 0-word lists (cwe); where it says they fit, lm-eval's samples are real and as long
    as asked. (vt's and fwe's samplers would never end there: only the messages are checked.)
    The random states the checks draw from are put back."""
    import random
    from lm_eval.tasks.ruler import cwe_utils, fwe_utils
    from megatron.evaluation.ruler_fit import why_no_sample
    state = random.getstate(), np.random.get_state()[1].copy()
    assert re.fullmatch(r"its smallest word list \(10 words, with its few-shot example and 120 answer tokens\) needs "
                        r"\d+-\d+ tokens in 50 draws, more than 1024; lm-eval 0.4.13's sampler would then make lists "
                        r"of 0 words \(which its scoring divides by\) or never end",
                        why_no_sample("ruler_cwe", 1024, byte_level_hf))
    assert random.getstate() == state[0] and (np.random.get_state()[1] == state[1]).all()
    made = cwe_utils.sys_word_pair_random(num_samples=3, max_seq_length=1024, tokenizer=byte_level_hf)
    assert [d["outputs"] for d in made] == [[], [], []]
    assert re.fullmatch(r"its in-context example, made to fit 500 tokens from at least 5 noise sentences, needs \d+ "
                        r"with this tokenizer: lm-eval 0.4.13's sampler would never end \(at any length\)",
                        why_no_sample("ruler_vt", 2048, byte_level_hf))
    assert why_no_sample("ruler_fwe", 128, byte_level_hf) == (
        "its vocabulary is length / 50 = 2 coded word(s), fewer than the noise word and 3 answers lm-eval 0.4.13's "
        "sampler needs")
    assert re.fullmatch(r"its prompt with no words has \d+ tokens: lm-eval 0.4.13's sampler would never end",
                        why_no_sample("ruler_fwe", 256, byte_level_hf))
    assert len(byte_level_hf(fwe_utils.TEMPLATE.format(context="", query="")).input_ids) > 256
    for length in (512, 1024):  # lm-eval's samples: within its 50-token answer reserve, the 3 answers in the text
        assert why_no_sample("ruler_fwe", length, byte_level_hf) is None
        made = fwe_utils.sys_kwext(byte_level_hf, length, num_samples=2)
        assert all(d["length"] <= length + 50 and len(d["outputs"]) == 3 for d in made)
        assert all(a in d["input"].split() for d in made for a in d["outputs"])
    assert why_no_sample("niah_single_1", 64, byte_level_hf) is None  # lm-eval's niah samplers say so themselves


@pytest.mark.launches
def test_eval_py_writes_ruler_results_and_make_tables_prints_them(run, tmp_path):  # noqa: F811
    results = tmp_path / "results"
    base = [sys.executable, "eval.py", str(run["config"]), "--set", f"eval-results-dir={results}"]
    env = child_environment()
    refused = subprocess.run(base + ["--eval_tasks", "niah_single_1", "ruler_qa_hotpot"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "ruler_qa_hotpot cannot run here" in refused.stderr
    assert "Traceback" not in refused.stderr and "Generating" not in refused.stderr  # before any data is made
    bad = subprocess.run(base + ["--eval_tasks", "niah_single_1", "--set", "eval-task-metadata={tokenizer: gpt2}"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert "eval-task-metadata: sets tokenizer, but eval.py hands lm-eval the run's own tokenizer" in bad.stderr
    done = subprocess.run(base + ["--eval_tasks", "niah_single_1", "--set", "eval-task-limit=2",
                                  "--set", "eval-task-metadata={max_seq_lengths: [256, 512]}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = (results / "lm_eval").glob("*.json")
    document = json.loads(written.read_text())
    assert document["evaluation"]["max_length"] == 512 and document["evaluation"]["ruler"]["lengths"] == [256, 512]
    ruler = document["ruler"]["niah_single_1"]
    assert ruler["256"]["score"] is None and "no sample fits" in ruler["256"]["note"]
    assert ruler["512"]["n"] == 2 and len(ruler["512"]["scores"]) == 2
    assert "512,none" in document["results"]["niah_single_1"]
    table = subprocess.run([sys.executable, "-m", "tools.analysis.ruler_table", str(results)], cwd=REPO_ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert re.search(r"\| 256 \(4×\) \| no sample fits \|", table.stdout)
    assert re.search(r"\| 512 \(8×\) \| \d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=2 \|", table.stdout)
    # make_tables' selection applies to them: --length, --rename (the label shown), --ruler-task
    from megatron.evaluation.results import ResultFileError
    from tools.analysis.long_context_tables import long_context_tables
    selection = dict(results=[str(results)], method=None, name=None, seed=None, keep_lengths=[512],
                     rename=["kerple_log=KERPLE"], ruler_task=["niah_*"], reference="KERPLE", alpha=0.05)
    shown = long_context_tables(argparse.Namespace(**selection), [])
    assert "RULER niah_single_1" in shown and "| length | KERPLE |" in shown and "| 256 (4×)" not in shown
    assert re.search(r"\| niah_single_1 \| (none \(score 0 at 512\)|512 \(8×\)) \|", shown)
    with pytest.raises(ResultFileError, match=r"--ruler-task 'ruler_cwe': no RULER result of these tasks in the runs "
                       r"selected \(their tasks: niah_single_1\)"):
        long_context_tables(argparse.Namespace(**{**selection, "ruler_task": ["ruler_cwe"]}), [])


def test_eval_task_metadata_is_checked_with_the_config(tmp_path):
    from megatron.errors import NeoXArgsError
    with pytest.raises(NeoXArgsError, match=r"eval-task-metadata: max_seq_lengths must be a non-empty list of "
                       r"positive token counts, e.g. \[64, 128, 256\], got \[512, 0\]"):
        tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": [512, 0]})
    with pytest.raises(NeoXArgsError, match=r"eval-task-metadata: sets pretrained, but eval.py hands lm-eval"):
        tiny_args("unused-data", tmp_path, eval_task_metadata={"pretrained": "gpt2"})
    assert tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": [512]}).eval_task_metadata == {
        "max_seq_lengths": [512]}
