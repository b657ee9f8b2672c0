"""Run lm-evaluation-harness tasks on one trained run and write the result (what eval.py calls).

The checkpoint is loaded as evaluate.py loads it; the JSON goes to `<eval-results-dir>/lm_eval/<run>.json`
(beside evaluate.py's files, in a folder of its own so the length tables never read it as theirs).

A result file that already exists is never overwritten (as evaluate.py's, megatron/evaluation/merge.py):
when it holds the same checkpoint scored the same way (same length, stride, limit, few-shot count, seed
and lm-eval version), the new tasks merge into it — the earlier tasks not run again are kept, the ones
run again replaced; otherwise eval.py stops before loading anything and says what differs."""
import dataclasses
import datetime
import difflib
import json
import pathlib

from megatron.checkpoint.inference_model import inference_device_and_dtype, load
from megatron.evaluation.driver import check_position_range
from megatron.run.preflight import folder_problem, memory_problem
from megatron.quoting import quote
from .lm_eval_adapter import NeoXLM
from .lm_eval_log import lm_eval_output_to
from .merge import CHECKPOINT_FIELDS, differences, write_merged
from .results import ResultFileError
from .ruler import RulerRun, ruler_table, ruler_tasks
from .run import EvaluationError, checked_plan, open_run
from .run_keys import EvaluationRun, LmEvalTasks

SCHEMA = "neox-lm-eval/1"
# `evaluation` fields that decide what a task's numbers mean; results scored under different values do not mix.
SAME_SETTINGS = ("max_length", "stride", "limit", "num_fewshot", "seed", "lm_eval")
MERGED_BY_TASK = ("results", "n-shot", "versions", "ruler")  # the document's per-task dictionaries


def task_manager_for(keys: LmEvalTasks):
    """lm-eval's TaskManager and the task names; unknown names are an error. When every task is in
    eval-task-paths, lm-eval's ~14,000 built-in tasks are not indexed (that takes 10-20 s)."""
    from lm_eval.tasks import TaskManager
    tasks = list(keys.tasks)
    if not tasks:
        raise EvaluationError("no tasks to run: give --eval_tasks TASK... (or `eval-tasks` in a config), e.g. "
                              "--eval_tasks lambada_openai hellaswag.")
    paths = list(keys.task_paths)
    for folder in paths:
        if not pathlib.Path(folder).is_dir():
            raise EvaluationError(f"eval-task-paths: {folder} is not a folder; give folders of lm-eval task YAML files.")
    metadata = keys.task_metadata  # eval-task-metadata, for every task (RULER's: ruler.py)
    manager = TaskManager(include_path=paths, include_defaults=False, metadata=metadata) if paths else None
    if manager is None or not set(tasks) <= set(manager.all_tasks):
        manager = TaskManager(include_path=paths or None, metadata=metadata)
    known = set(manager.all_tasks)
    unknown = [t for t in tasks if t not in known]
    if unknown:
        hints = {t: difflib.get_close_matches(t, known, n=3) for t in unknown}
        said = "; ".join(f"{t!r}" + (f" (did you mean {', '.join(h)}?)" if h else "") for t, h in hints.items())
        raise EvaluationError(f"eval-tasks: unknown lm-eval task(s) {said}. `lm-eval ls tasks` lists the "
                              "installed ones; a task of your own is a YAML file in a folder named by eval-task-paths.")
    check_hub_reachable([t for t in tasks if not is_local_task(manager, t, paths)])
    return manager, tasks


def is_local_task(manager, task: str, paths: list[str]) -> bool:
    """Whether the task's YAML file lies in one of eval-task-paths (its data beside it, not on the hub)."""
    entry = manager.task_index.get(task)
    yaml_path = getattr(entry, "yaml_path", None) or (entry.get("yaml_path") if isinstance(entry, dict) else None)
    if not yaml_path:
        return False
    found = pathlib.Path(yaml_path).resolve()
    return any(pathlib.Path(folder).resolve() in found.parents for folder in paths)


HUB = ("huggingface.co", 443)


def check_hub_reachable(hub_tasks: list[str]) -> None:
    """lm-eval's built-in tasks download their data from the Hugging Face hub; offline, `datasets` retries
    for minutes and ends in a long ConnectionError. Said in one paragraph before the model loads instead.
    HF_DATASETS_OFFLINE=1 (data already in the cache) skips the check, as it skips the download."""
    import os
    import socket
    if not hub_tasks or os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        return
    try:
        socket.create_connection(HUB, timeout=5).close()
    except OSError as err:
        raise EvaluationError(
            f"eval-tasks: {', '.join(hub_tasks)} read their data from the Hugging Face hub, and {HUB[0]} cannot be "
            f"reached from this machine ({err.strerror or err}). Run a local task instead: an lm-eval task YAML file "
            "with its data, in a folder named by eval-task-paths (docs/lm-eval.md, \"A task of your own, offline\"); "
            "or, if the task's data is already in your Hugging Face cache, set HF_DATASETS_OFFLINE=1.") from None


def earlier_task_results(path: pathlib.Path, evaluation: dict, run: dict) -> dict | None:
    """The lm-eval result file already at `path` when the new evaluation may merge into it, else None
    when there is none. Raises ResultFileError (before anything is loaded) when it cannot be merged."""
    if not path.exists():
        return None
    keep_it = (f"It is never overwritten: write into another eval-results-dir, or move {path} away first if "
               "it is no longer wanted.")
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"{path} already exists and cannot be read as an lm-eval result file ({err}). "
                              f"{keep_it}") from None
    if not (isinstance(document, dict) and document.get("schema") == SCHEMA
            and all(isinstance(document.get(k), dict) for k in ("run", "evaluation", "results"))):
        schema = document.get("schema") if isinstance(document, dict) else None
        raise ResultFileError(f"{path} already exists but is not an lm-eval result file of schema {SCHEMA} "
                              f"(its schema is {schema!r}, or it lacks run, evaluation or results). {keep_it}")
    differ = differences(document, run, evaluation, CHECKPOINT_FIELDS, SAME_SETTINGS)
    if differ:
        raise ResultFileError(f"{path} already holds lm-eval results of this checkpoint, scored differently ("
                              + "; ".join(differ) + f"), so the new tasks cannot be merged into it. {keep_it}")
    return document


def merged_tasks(earlier: dict | None, document: dict) -> tuple[dict, list[str]]:
    """(the document to write, the earlier tasks kept): the new tasks' entries replace the earlier ones."""
    if earlier is None:
        return document, []
    kept = [t for t in earlier["evaluation"].get("tasks", []) if t not in document["evaluation"]["tasks"]]
    out = dict(document, evaluation=dict(document["evaluation"], tasks=kept + document["evaluation"]["tasks"]))
    for key in MERGED_BY_TASK:
        out[key] = {**(earlier.get(key) or {}), **(document.get(key) or {})}
    return out, kept


def check_ruler_lengths_fit(keys: LmEvalTasks, evaluation: EvaluationRun, lengths: list[int], vocab_rows: int) -> None:
    """RULER's lengths against memory with evaluate.py's start-up check (preflight.memory_problem at the longest
    length, one sequence a forward), before lm-eval builds any sample: a length nothing could score (10^8
    tokens) otherwise had lm-eval build its haystack until the process was killed."""
    def problem_at(asked):
        sized = dataclasses.replace(evaluation.start.preflight, eval_lengths=tuple(asked), eval_micro_batch_size=1)
        return memory_problem(sized, evaluation.inference.model, False, vocab_rows)

    problem = problem_at(lengths)
    if problem is None:
        return
    low, high = 0, max(lengths)  # the longest length that fits: memory_problem is monotone in the length
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if problem_at([middle]) is None else (low, middle)
    key = ("eval_task_metadata" if (keys.task_metadata or {}).get("max_seq_lengths") else
           "eval_lengths" if keys.eval_lengths else None)  # ruler_lengths' order; None: its ladder
    source = {"eval_task_metadata": "eval-task-metadata max_seq_lengths", "eval_lengths": "eval-lengths (RULER's "
              "lengths, as eval-task-metadata names none)"}.get(key, "RULER's default lengths (multiples of seq-length)")
    where = keys.sources.get(key, "the config") if key else "the config"
    raise EvaluationError(f"{where}: {source} {quote(lengths)} cannot be scored here, at the longest: {problem} "
                          f"The longest RULER length that fits is {low:,} tokens; give lengths up to it "
                          "(eval-task-metadata: {max_seq_lengths: [...]}). Nothing was built or scored.")


def evaluate_tasks(evaluation: EvaluationRun, keys: LmEvalTasks) -> pathlib.Path:
    """Score `keys.tasks` on the checkpoint `evaluation` names and write (or merge into) its lm-eval result file;
    return its path. Both records come from the run's config (`NeoXArgs.evaluation_run()`, `NeoXArgs.lm_eval_tasks()`)."""
    # Everything that can be checked without lm-eval or the model: before either is loaded.
    settings = evaluation.settings
    checked_plan(settings)  # `load` is set and exists (eval-task-limit and the like: the config's)
    results_dir = pathlib.Path(settings.results_dir) / "lm_eval"
    problem = folder_problem(results_dir, "eval-results-dir", keys.sources.get("eval_results_dir", "the config"))
    if problem:
        raise EvaluationError(problem)
    device, _ = inference_device_and_dtype(evaluation.inference)
    asked_ruler = ruler_tasks(keys.tasks)
    ruler = RulerRun(keys, settings.seed, asked_ruler) if asked_ruler else None  # refuses unavailable data before loading
    length = keys.task_length or (ruler.longest if ruler else keys.seq_length)
    if ruler and length < ruler.longest:
        raise EvaluationError(f"eval-task-length {length} is shorter than the longest RULER length {ruler.longest}: "
                              "its prompts would lose their beginning (and the needle). Leave eval-task-length unset "
                              f"(eval.py then uses {ruler.longest}) or set it to at least {ruler.longest}.")
    opened, run = open_run(settings, evaluation.evaluated)
    if ruler:  # before lm-eval builds a haystack of each length, and before the model loads
        check_ruler_lengths_fit(keys, evaluation, ruler.lengths, opened.config.padded_vocab_size)
    path = results_dir / f"{run['name']}.json"
    import lm_eval
    scoring = {"max_length": length, "stride": settings.stride or length, "limit": keys.task_limit,
               "num_fewshot": keys.num_fewshot, "seed": settings.seed, "lm_eval": lm_eval.__version__}
    earlier_task_results(path, scoring, run)  # a file it cannot merge with is refused before the model loads
    from lm_eval.utils import make_table

    tasks = list(keys.tasks)
    # lm-eval's own output (stderr: its log, progress bars, warnings) goes to a file beside the results; this
    # project's lines (tables, what could not be scored) are printed to stdout and stay on the terminal.
    with lm_eval_output_to(path.with_suffix(".log"), f"eval.py {' '.join(tasks)} on {run['name']}"):
        others = [t for t in tasks if not (ruler and (t in ruler.tasks or t == "ruler"))]
        manager = task_manager_for(keys)[0] if others or not ruler else None
        loaded = load(opened, evaluation.inference, device)
        model, tokenizer = loaded.model, loaded.tokenizer
        limit = model.position_limit()
        if limit is not None and length > limit:
            raise EvaluationError(f"eval-task-length {length} exceeds the {limit} positions pos-emb "
                                  f"{evaluation.evaluated.pos_emb} can embed; set eval-task-length <= {limit}.")
        if ruler:  # what each positional module computes in this dtype (xpos), as evaluate.py checks its lengths
            check_position_range(model, ruler.lengths, next(model.parameters()).dtype)
        lm = NeoXLM(model, tokenizer, max_length=length, stride=settings.stride, device=device)
        output = {"results": {}}
        if others:
            seed = settings.seed
            output = lm_eval.simple_evaluate(model=lm, tasks=others, task_manager=manager, limit=keys.task_limit,
                                             num_fewshot=keys.num_fewshot, log_samples=False,
                                             random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                             fewshot_random_seed=seed)
            print(make_table(output), flush=True)
        if ruler:  # each task at each length (megatron/evaluation/ruler.py)
            measured = ruler.evaluate(lm, tokenizer)
            output = dict(output, results={**output["results"], **measured["results"]}, ruler=measured["ruler"])
            print(ruler_table(measured["ruler"]), flush=True)
    document = {"schema": SCHEMA, "run": run,
                "evaluation": {"tasks": tasks, **scoring, "device": str(device),
                               "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
                "results": output["results"], "n-shot": output.get("n-shot"), "versions": output.get("versions")}
    if ruler:
        document["evaluation"]["ruler"] = {"lengths": ruler.lengths, "task_metadata": ruler.user_metadata}
        document["ruler"] = output["ruler"]
    document = json.loads(json.dumps(document, default=str))
    kept = write_merged(path, lambda: merged_tasks(earlier_task_results(path, scoring, run), document),
                        "the task results (printed above)")
    print(f"wrote {path}" + (f" (kept the earlier results there for tasks {kept}: same checkpoint, scored the "
                             "same way)" if kept else ""), flush=True)
    return path
