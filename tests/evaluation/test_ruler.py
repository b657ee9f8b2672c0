"""RULER through eval.py (megatron/evaluation/ruler.py) and the effective length (tools/analysis/effective_length.py):
every sample lm-eval makes is as long as asked, measured with this project's tokenizer; the project's
scores are lm-eval's scoring of the generations; the effective length of a hand-worked example; data
that is not here is refused in one paragraph; eval.py writes RULER results that make_tables prints."""
import re

import numpy as np
import pytest
from tests.support.lm_eval import MODEL, run  # noqa: F401 (`run`: the module's checkpoint fixture)
from tests.support.training import tiny_args

from megatron.evaluation.identity import Method
from megatron.evaluation.ruler import go_offline, import_ruler_offline, refuse_unavailable
from megatron.evaluation.run import EvaluationError
from megatron.tokenizer.hf_files import export_tokenizer
from tools.analysis.effective_length import Curve, effective_length, estimate


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


def test_eval_task_metadata_is_checked_with_the_config(tmp_path):
    from megatron.errors import NeoXArgsError
    with pytest.raises(NeoXArgsError, match=r"eval-task-metadata: max_seq_lengths must be a non-empty list of "
                       r"positive token counts, e.g. \[64, 128, 256\], got \[512, 0\]"):
        tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": [512, 0]})
    with pytest.raises(NeoXArgsError, match=r"eval-task-metadata: sets pretrained, but eval.py hands lm-eval"):
        tiny_args("unused-data", tmp_path, eval_task_metadata={"pretrained": "gpt2"})
    assert tiny_args("unused-data", tmp_path, eval_task_metadata={"max_seq_lengths": [512]}).eval_task_metadata == {
        "max_seq_lengths": [512]}
