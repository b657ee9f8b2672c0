"""Whether lm-eval 0.4.13's word and variable samplers (ruler_cwe, ruler_vt, ruler_fwe) can make a real sample
at a length with the run's tokenizer, asked before lm-eval is (what ruler.py calls for them).

The niah samplers say so themselves ("Could not generate any sample"); these three do not. Below the
length their smallest sample needs, each does something else, found by reading and running their code
with byte-level tokens:
- ruler_cwe sizes its word list from ONE random draw of 10 words (few-shot example + list + answers);
  when that draw does not fit it goes on with 0 words: an empty list whose empty answer lm-eval's
  scoring divides by (ZeroDivisionError), or, below the template itself, a loop that never ends;
- ruler_vt first makes an in-context example at 500 tokens from 5 noise sentences; when those do not fit
  it loops forever (with byte-level tokens they need ~900), and the same at the length asked with 10;
- ruler_fwe drops words until its prompt fits, forever when the prompt with no words does not, and draws
  its 3 answers from a vocabulary of length / 50 words (fewer than 4 below 200 tokens: fewer than 3
  answers, or none); with room for few words the answers need not appear in the text at all.
So each is asked here with lm-eval's own functions and the tokenizer lm-eval will use; the random
states they draw from are put back afterwards, so the samples lm-eval then makes are unchanged."""
import contextlib
import io
import random

import numpy as np

CWE_DRAWS = 50  # draws of cwe's 10-word search sample; all must fit, since lm-eval's search uses one


@contextlib.contextmanager
def _random_states_kept():
    states = random.getstate(), np.random.get_state()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # vt prints a line per try
            yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])


def _cwe(length: int, tokenizer, count) -> str | None:
    from lm_eval.tasks.ruler import cwe_utils as cwe
    rng = cwe.RNG.getstate()
    try:
        needed = []
        for _ in range(CWE_DRAWS):  # what sys_word_pair_random measures for its first (10-word) try
            example, text, answer = cwe.generate_input_output(10, length)
            listed = " ".join(f"{i + 1}. {w}" for i, w in enumerate(answer))
            needed.append(count(example + "\n" + text + " " + listed) + cwe.CONFIG["tokens_to_generate"])
    finally:
        cwe.RNG.setstate(rng)
    if max(needed) <= length:
        return None
    return (f"its smallest word list (10 words, with its few-shot example and {cwe.CONFIG['tokens_to_generate']} "
            f"answer tokens) needs {min(needed)}-{max(needed)} tokens in {CWE_DRAWS} draws, more than {length}; "
            "lm-eval 0.4.13's sampler would then make lists of 0 words (which its scoring divides by) or never end")


def _vt(length: int, tokenizer, count) -> str | None:
    from lm_eval.tasks.ruler import vt_utils as vt
    reserve = vt.CONFIG["variable_tracking"]["tokens_to_generate"]
    icl_text, icl_answer = vt.generate_input_output(5, 1, 4, is_icl=True)  # sys_vartrack_w_noise_random's first try
    icl = count(icl_text) + reserve
    if icl > 500:
        return (f"its in-context example, made to fit 500 tokens from at least 5 noise sentences, needs {icl} with "
                "this tokenizer: lm-eval 0.4.13's sampler would never end (at any length)")
    example = count(icl_text + " " + " ".join(icl_answer) + "\n\n")
    text, _ = vt.generate_input_output(10, 1, 4)
    needed = count(text) + reserve + example
    if needed > length:
        return (f"its smallest sample (10 noise sentences, the in-context example and {reserve} answer tokens) needs "
                f"{needed} tokens: lm-eval 0.4.13's sampler would never end")
    return None


def _fwe(length: int, tokenizer, count) -> str | None:
    from lm_eval.tasks.ruler import fwe_utils as fwe
    vocabulary = length // 50  # sys_kwext's vocab_size; word 0 is the "...." noise, 1-3 the answers
    if vocabulary < 4:
        return (f"its vocabulary is length / 50 = {vocabulary} coded word(s), fewer than the noise word and 3 "
                "answers lm-eval 0.4.13's sampler needs")
    empty = count(fwe.TEMPLATE.format(context="", query=""))
    if empty > length:  # it drops words until the prompt fits: with none left it goes on dropping
        return f"its prompt with no words has {empty} tokens: lm-eval 0.4.13's sampler would never end"
    step = length // 32
    _, _, words = fwe.generate_input_output(length, tokenizer, vocab_size=vocabulary, incremental=step)  # its search
    text, answer, _ = fwe.generate_input_output(length, tokenizer, num_words=words, vocab_size=vocabulary,
                                               incremental=step)
    absent = [word for word in answer if word not in text.split()]
    if absent:
        return (f"its sample at this length has room for too few coded words: {len(absent)} of its 3 answers do not "
                "appear in it")
    return None


CHECKS = {"ruler_cwe": _cwe, "ruler_vt": _vt, "ruler_fwe": _fwe}


def why_no_sample(task: str, length: int, tokenizer) -> str | None:
    """None when lm-eval's sampler for `task` makes real samples at `length` with `tokenizer` (the Hugging Face
    tokenizer lm-eval sizes samples with), else why not. Tasks without a check here say so themselves."""
    check = CHECKS.get(task)
    if check is None:
        return None
    with _random_states_kept():
        return check(length, tokenizer, lambda text: len(tokenizer(text).input_ids))
