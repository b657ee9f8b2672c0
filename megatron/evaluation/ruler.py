"""lm-eval's RULER tasks at a list of lengths, with the run's own tokenizer (what eval.py calls for them).

RULER's tasks make their data and size every sample to a length with a tokenizer named in the task
manager's metadata (lm_eval/tasks/ruler/common_utils.py `get_tokenizer`). eval.py writes the
checkpoint's tokenizer as a Hugging Face tokenizer folder that encodes exactly as this project's
(megatron/tokenizer/hf_files.py) into a temporary folder and names it there, with `max_seq_lengths`
set to the lengths asked: `eval-task-metadata: {max_seq_lengths: [...]}`, else `eval-lengths` (the run's
extrapolation ladder, configs/eval/*.yml), else 1x, 2x, ... 32x seq-length.

Each task runs once per length (lm-eval's `limit` then means samples per length, where lm-eval
would cut the concatenation of all lengths), with the same seed, so every run sharing a tokenizer
scores the same samples (paired comparisons). A length too short for the task's prompt template
and answer reserve (RULER reserves 128 tokens for niah's answer) is recorded as such, not scored: the niah
samplers say so, the word and variable samplers are asked first (ruler_fit.py).

Only data that needs no download runs: the haystacks of repeated sentences, needles, random words
and variables. The tasks built on Paul Graham's essays run when that dataset is in the Hugging Face
cache and NLTK's punkt_tab is installed; the QA tasks download SQuAD / HotpotQA on every run (lm-eval
keeps no copy) and are refused: eval.py runs lm-eval offline."""
import contextlib
import importlib.util
import os
import pathlib
import tempfile

import numpy as np

from megatron.quoting import quote
from .ruler_fit import why_no_sample
from .run import EvaluationError
from .run_keys import LmEvalTasks

SYNTHETIC = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe", "ruler_fwe")
ESSAY = ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multiquery", "niah_multivalue")
DOWNLOADED = {"ruler_qa_squad": "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json",
              "ruler_qa_hotpot": "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"}
RULER_TASKS = SYNTHETIC + ESSAY + tuple(DOWNLOADED)
GROUP = "ruler"  # lm-eval's group of the 13
ESSAYS = "baber/paul_graham_essays"
LADDER = (1, 2, 4, 8, 16, 32)  # multiples of seq-length when neither metadata nor eval-lengths names lengths
BOOTSTRAP_DRAWS = 1000


def ruler_tasks(tasks) -> list[str]:
    """The RULER tasks among `tasks`, lm-eval's `ruler` group expanded, in RULER's order."""
    asked = set(tasks)
    return [t for t in RULER_TASKS if t in asked or GROUP in asked]


def ruler_lengths(keys: LmEvalTasks) -> list[int]:
    metadata = keys.task_metadata or {}
    lengths = metadata.get("max_seq_lengths") or keys.eval_lengths or [f * keys.seq_length for f in LADDER]
    return sorted({int(n) for n in lengths})


def _missing_essays() -> list[str]:
    """What the essay haystacks lack on this machine (empty when they can be built offline)."""
    import nltk
    missing = []
    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        missing.append("NLTK's punkt_tab (sentence splitter)")
    try:
        import datasets
        datasets.load_dataset(ESSAYS, split="train")  # offline (go_offline): from the cache or not at all
    except Exception:  # noqa: BLE001 - any failure to load from the cache means "not here"
        missing.append(f"the Hugging Face dataset {ESSAYS}")
    return missing


def refuse_unavailable(tasks: list[str]) -> None:
    """One paragraph, before anything is loaded, for the tasks whose data this machine does not have."""
    if importlib.util.find_spec("wonderwords") is None:
        raise EvaluationError("RULER's tasks draw their needles and words with the `wonderwords` package, which is "
                              "not installed: `pip install wonderwords` (it is in requirements/requirements.txt).")
    downloaded = [t for t in tasks if t in DOWNLOADED]
    if downloaded:
        urls = "; ".join(f"{t}: {DOWNLOADED[t]}" for t in downloaded)
        raise EvaluationError(
            f"eval-tasks: {', '.join(downloaded)} cannot run here: lm-eval 0.4.13 downloads its questions on every "
            f"run and keeps no local copy ({urls}), and eval.py runs lm-eval offline. Leave it out; the RULER tasks "
            f"that need no data are {', '.join(SYNTHETIC)}.")
    essay = [t for t in tasks if t in ESSAY]
    missing = _missing_essays() if essay else []
    if missing:
        raise EvaluationError(
            f"eval-tasks: {', '.join(essay)} build their haystack from Paul Graham's essays, and "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on this machine (eval.py runs "
            f"lm-eval offline, so nothing is downloaded). To make them available, on a machine with internet run "
            f"`python -c \"import datasets, nltk; datasets.load_dataset('{ESSAYS}', split='train'); "
            f"nltk.download('punkt_tab')\"` and copy ~/.cache/huggingface and ~/nltk_data here (or point HF_HOME "
            f"and NLTK_DATA at copies). The RULER tasks that need no data are {', '.join(SYNTHETIC)}.")


def go_offline() -> None:
    """Hugging Face's hub and datasets offline for the rest of this process, so a dataset not in the cache
    fails at once (online, the hub client retries an unreachable host for about a minute). Set before
    huggingface_hub and datasets are first imported: they read these variables then, not later."""
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})


def import_ruler_offline() -> None:
    """Import lm-eval's RULER sampler without its import-time `nltk.download('punkt_tab')`, which tries the
    network for ~5 s when punkt_tab is missing and only the essay tasks (checked above) need it."""
    import nltk
    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        download, nltk.download = nltk.download, lambda *a, **k: False
        try:  # its "Downloaded punkt_tab" line is printed whatever download returned
            with contextlib.redirect_stdout(None):
                import lm_eval.tasks.ruler.prepare_niah  # noqa: F401
        finally:
            nltk.download = download


def ruler_manager(metadata: dict):
    """A TaskManager of the RULER folder only (indexing all ~14,000 tasks takes 10-20 s) with `metadata`."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    folder = pathlib.Path(lm_eval.__file__).parent / "tasks" / "ruler"
    return TaskManager(include_path=str(folder), include_defaults=False, metadata=metadata)


def summary(scores, seed: int = 0) -> dict:
    """Mean, standard error and a percentile-bootstrap 95% interval of per-sample scores."""
    x = np.asarray(scores, dtype=np.float64)
    draws = np.random.default_rng(seed).choice(x, size=(BOOTSTRAP_DRAWS, x.size)).mean(axis=1)
    return {"score": float(x.mean()), "stderr": float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else None,
            "ci95": [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))], "n": int(x.size)}


def per_length_scores(samples: list[dict], length: int) -> tuple[list[int], list[float]]:
    """(doc ids, scores) of the samples lm-eval scored at `length` (its metric is named by the length)."""
    key = str(length)
    kept = [s for s in samples if s["doc"]["max_length"] == length]
    return [int(s["doc_id"]) for s in kept], [float(s[key]) for s in kept]


class RulerRun:
    """The RULER part of one eval.py run: its tasks, lengths and lm-eval metadata."""

    def __init__(self, keys: LmEvalTasks, seed: int, tasks: list[str]):
        self.tasks, self.lengths = tasks, ruler_lengths(keys)
        self.user_metadata = {k: v for k, v in (keys.task_metadata or {}).items() if k != "max_seq_lengths"}
        self.limit, self.seed = keys.task_limit, seed
        go_offline()
        refuse_unavailable(tasks)

    @property
    def longest(self) -> int:
        return max(self.lengths)

    def evaluate(self, lm, tokenizer) -> dict:
        """{"results": lm-eval's results merged over lengths, "ruler": {task: {length: summary}},
        "samples": {task: {length: lm-eval's logged samples}} (the generations; not written)}."""
        import lm_eval
        from lm_eval.tasks.ruler.common_utils import get_tokenizer
        from megatron.tokenizer.hf_files import export_tokenizer
        results, records, logged = {}, {}, {}
        with tempfile.TemporaryDirectory(prefix="ruler-tokenizer-") as folder:
            export_tokenizer(tokenizer, pathlib.Path(folder))
            import_ruler_offline()
            for task in self.tasks:
                merged, records[task], logged[task] = {}, {}, {}
                for length in self.lengths:
                    why = why_no_sample(task, length, get_tokenizer(folder))
                    if why:
                        records[task][str(length)] = no_sample(task, length, why)
                        continue
                    manager = ruler_manager({**self.user_metadata, "tokenizer": folder, "max_seq_lengths": [length]})
                    try:
                        output = lm_eval.simple_evaluate(
                            model=lm, tasks=[task], task_manager=manager, limit=self.limit, log_samples=True,
                            bootstrap_iters=BOOTSTRAP_DRAWS, random_seed=self.seed, numpy_random_seed=self.seed,
                            torch_random_seed=self.seed, fewshot_random_seed=self.seed)
                    except ValueError as err:
                        if "Could not generate any sample" not in str(err):
                            raise
                        records[task][str(length)] = no_sample(task, length, "lm-eval says "
                                                                + quote(str(err)))
                        continue
                    logged[task][str(length)] = output["samples"][task]
                    ids, scores = per_length_scores(output["samples"][task], length)
                    records[task][str(length)] = {**summary(scores, self.seed), "doc_ids": ids, "scores": scores}
                    theirs = output["results"][task]
                    merged.update({k: v for k, v in theirs.items() if k == "alias" or k.split(",")[0]
                                   in (str(length), f"{length}_stderr")})
                results[task] = merged
        return {"results": results, "ruler": records, "samples": logged}


def no_sample(task: str, length: int, why: str) -> dict:
    """The record of a length too short for the task's samples (said, not scored)."""
    print(f"{task} at {length} tokens: no sample fits: {why}", flush=True)
    return {"score": None, "n": 0, "note": f"no sample fits this length: {why}"}


def ruler_table(records: dict) -> str:
    """Task x length: score [bootstrap 95% interval] (n samples), what eval.py prints after its run."""
    lengths = sorted({int(n) for per_task in records.values() for n in per_task})
    head = "| task | " + " | ".join(str(n) for n in lengths) + " |"
    rows = [head, "|" + "---|" * (len(lengths) + 1)]
    for task, per_length in records.items():
        cells = []
        for n in lengths:
            r = per_length.get(str(n))
            cells.append("" if r is None else "no sample fits" if r["score"] is None else
                         f"{r['score']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (n={r['n']})")
        rows.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
