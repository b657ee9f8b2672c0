"""Run lm-evaluation-harness tasks on one trained run and write the result (what eval.py calls).

The checkpoint is loaded as evaluate.py loads it; the JSON goes to `<eval-results-dir>/lm_eval/<run>.json`
(beside evaluate.py's files, in a folder of its own so the length tables never read it as theirs)."""
import datetime
import difflib
import json
import pathlib

import torch

from megatron.checkpointing import load_model_weights
from megatron.model import GPTModel
from megatron.tokenizer import build_tokenizer
from .lm_eval_adapter import NeoXLM
from .results import write_atomic
from .run import EvaluationError, _checked_plan, run_record, trained_config

SCHEMA = "neox-lm-eval/1"


def task_manager_for(neox_args):
    """lm-eval's TaskManager and the task names; unknown names are an error. When every task is in
    eval-task-paths, lm-eval's ~14,000 built-in tasks are not indexed (that takes 10-20 s)."""
    from lm_eval.tasks import TaskManager
    tasks = list(neox_args.eval_tasks or [])
    if not tasks:
        raise EvaluationError("no tasks to run: give --eval_tasks TASK... (or `eval-tasks` in a config), e.g. "
                              "--eval_tasks lambada_openai hellaswag.")
    paths = [str(p) for p in neox_args.eval_task_paths or []]
    for folder in paths:
        if not pathlib.Path(folder).is_dir():
            raise EvaluationError(f"eval-task-paths: {folder} is not a folder; give folders of lm-eval task YAML files.")
    manager = TaskManager(include_path=paths, include_defaults=False) if paths else None
    if manager is None or not set(tasks) <= set(manager.all_tasks):
        manager = TaskManager(include_path=paths or None)
    known = set(manager.all_tasks)
    unknown = [t for t in tasks if t not in known]
    if unknown:
        hints = {t: difflib.get_close_matches(t, known, n=3) for t in unknown}
        said = "; ".join(f"{t!r}" + (f" (did you mean {', '.join(h)}?)" if h else "") for t, h in hints.items())
        raise EvaluationError(f"eval-tasks: unknown lm-eval task(s) {said}. `lm-eval ls tasks` lists the "
                              "installed ones; a task of your own is a YAML file in a folder named by eval-task-paths.")
    return manager, tasks


def evaluate_tasks(neox_args) -> pathlib.Path:
    import lm_eval
    from lm_eval.utils import make_table

    _checked_plan(neox_args)  # `load` is set and exists: checked before lm-eval indexes its tasks
    manager, tasks = task_manager_for(neox_args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = build_tokenizer(neox_args)
    model = GPTModel(neox_args, tokenizer.padded_vocab_size)
    iteration = load_model_weights(neox_args, model)
    model.to(device=device, dtype=torch.float32).eval()
    length = neox_args.eval_task_length or neox_args.seq_length
    limit = min((pe.max_length for pe in model.positional_embeddings() if pe.max_length), default=None)
    if limit is not None and length > limit:
        raise EvaluationError(f"eval-task-length {length} exceeds the {limit} positions pos-emb {neox_args.pos_emb} "
                              f"can embed; set eval-task-length <= {limit}.")
    lm = NeoXLM(model, tokenizer, max_length=length, stride=neox_args.eval_stride, device=device)
    output = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, limit=neox_args.eval_task_limit,
                                     num_fewshot=neox_args.eval_task_num_fewshot, log_samples=False,
                                     random_seed=neox_args.eval_seed, numpy_random_seed=neox_args.eval_seed,
                                     torch_random_seed=neox_args.eval_seed, fewshot_random_seed=neox_args.eval_seed)
    print(make_table(output), flush=True)
    run = run_record(neox_args, trained_config(neox_args), iteration)
    path = pathlib.Path(neox_args.eval_results_dir) / "lm_eval" / f"{run['name']}.json"
    document = {"schema": SCHEMA, "run": run,
                "evaluation": {"tasks": tasks, "max_length": length, "stride": lm.stride,
                               "limit": neox_args.eval_task_limit, "num_fewshot": neox_args.eval_task_num_fewshot,
                               "lm_eval": lm_eval.__version__, "device": str(device),
                               "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
                "results": output["results"], "n-shot": output.get("n-shot"), "versions": output.get("versions")}
    write_atomic(path, json.loads(json.dumps(document, default=str)))
    print(f"wrote {path}", flush=True)
    return path
