"""Range checks of single config values that NeoXArgs' own validation leaves out, each one a value a
user has really written by mistake and that would otherwise lose data (keep-last-n-checkpoints: -1
deleted every checkpoint), give a plausible-looking wrong result (eval-micro-batch-size: -1 scored
nothing and reported loss 0) or end deep inside a library with a traceback (a negative lr, `split:
abc`). Also the one rule that no number in a config is NaN or infinite (`non_finite`, called first, so
every range check sees a real number) and the paths the filesystem must be able to hold (output_paths.path_problem).
Called once, after the derived values are filled in."""
import dataclasses
import math
import re

from megatron.output_paths import path_problem
from megatron.quoting import quote

# megatron-core reads `split` with re.findall("[.0-9]+"), so "abc" silently becomes 0,0,0 (and then
# NaN); only accept what it would read as the user meant: up to three numbers separated by , or /.
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_SPLIT = re.compile(rf"\s*{_NUMBER}(?:\s*[,/]\s*{_NUMBER}){{0,2}}\s*")


FLOAT32_MAX = 3.4028234663852886e38  # the model's parameters and buffers are float32 (or narrower)


def non_finite(value, path: str, bad=lambda number: not math.isfinite(number)):
    """The key path of the first NaN or infinite number in a config value (at any depth), else None;
    with `bad`, of the first float `bad` says is wrong."""
    if isinstance(value, float) and bad(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite(item, f"{path}[{key}]" if isinstance(value, list) else f"{path}.{key}", bad)
        if found is not None:
            return found
    return None


def past_float32(value, path: str):
    """The key path of the first float a float32 cannot hold (finite in YAML, beyond 3.4e38), else None."""
    return non_finite(value, path, lambda number: abs(number) > FLOAT32_MAX)


def check_values(args, fail) -> None:
    """`fail(key or key path, message)` raises the NeoXArgsError that names where it was set."""
    keep = args.keep_last_n_checkpoints
    if keep is not None and keep < 1:
        fail("keep_last_n_checkpoints", f"must be a positive integer, the number of newest checkpoints to keep "
             f"(null keeps all), got {quote(keep)}.")
    if args.checkpoint_factor is not None and args.checkpoint_factor < 1:
        fail("checkpoint_factor", f"must be a positive number of steps between saves (null saves at the end "
             f"only), got {quote(args.checkpoint_factor)}.")
    if args.eval_micro_batch_size < 1:
        fail("eval_micro_batch_size", f"must be a positive integer (sequences per evaluation forward), got "
             f"{quote(args.eval_micro_batch_size)}.")
    if not args.lr > 0:
        fail("optimizer", f"params.lr must be a positive learning rate, got {quote(args.lr)}.")
    if args.gradient_clipping < 0:
        fail("gradient_clipping", f"must be >= 0 (the largest global gradient norm; 0 turns clipping off), got "
             f"{quote(args.gradient_clipping)}: DeepSpeed clips only when it is > 0, so a negative value would "
             "silently train without clipping. Write 0 to turn clipping off.")
    if args.weight_decay < 0:
        fail("weight_decay", f"must be >= 0 (torch's Adam refuses a negative decay), got {quote(args.weight_decay)}.")
    if args.min_lr < 0:
        fail("min_lr", f"must be >= 0, got {quote(args.min_lr)}.")
    _check_eval_task_keys(args, fail)
    _check_paths(args, fail)
    if args.run_name is not None and (problem := run_name_problem(args.run_name)):
        fail("run_name", problem)
    if not _SPLIT.fullmatch(args.split) or sum(map(float, re.findall(_NUMBER, args.split))) <= 0:
        fail("split", f"{quote(args.split)} is not train/valid/test weights: write up to three non-negative numbers "
             "separated by commas, at least one of them positive, e.g. '969,30,1' or '100,0,0'.")


RUN_NAME_LIMIT = 100  # characters: a table's column header and a figure's legend entry, not a paragraph


def run_name_problem(name) -> str | None:
    """Why `name` cannot be a run's name, else None. It heads a column in every Markdown table and a line
    in every figure's legend, so it is one line of printable text of bounded length: a newline would start a
    row of its own (a forged one above the real numbers), and a megabyte would be an image too large to draw."""
    if not isinstance(name, str):
        return f"must be a name (a string), got {quote(name)}."
    if not name.strip():
        return "is empty; give the run a name, or remove the key (null labels it by what it trained with)."
    if len(name) > RUN_NAME_LIMIT:
        return (f"is {len(name)} characters long ({quote(name, 60)}); a run's name labels a table column and a "
                f"figure legend, so it may hold at most {RUN_NAME_LIMIT}. Choose a shorter name.")
    unprintable = sorted({c for c in name if not c.isprintable()})
    if unprintable:
        return (f"{quote(name, 60)} holds {', '.join(repr(c) for c in unprintable[:5])}, which is not printable "
                "text: a run's name is one line of printable characters (it heads table columns, where a line "
                "break would start a row of its own). Remove them.")
    return None


def _check_eval_task_keys(args, fail) -> None:
    """eval.py's keys, where 0 must not quietly mean "unset" (null does) nor a negative be recorded."""
    if args.eval_task_length is not None and args.eval_task_length < 1:
        fail("eval_task_length", f"must be a positive number of tokens (the adapter's max_length), got "
             f"{quote(args.eval_task_length)}. For the default (seq-length) leave it unset (null); 0 does not "
             "mean that.")
    if args.eval_task_num_fewshot is not None and args.eval_task_num_fewshot < 0:
        fail("eval_task_num_fewshot", f"must be >= 0 (few-shot examples per prompt; null takes each task's own), "
             f"got {quote(args.eval_task_num_fewshot)}.")
    limit = args.eval_task_limit
    if limit is not None and not (0 < limit < 1 or (limit >= 1 and float(limit).is_integer())):
        fail("eval_task_limit", f"must be a whole number of documents per task (>= 1) or a fraction of them in "
             f"(0, 1), as lm-eval reads it, got {quote(limit)}. Leave it unset (null) to score every document.")
    _check_eval_task_metadata(args.eval_task_metadata, fail)


def _check_eval_task_metadata(metadata, fail) -> None:
    """lm-eval's task metadata: string keys, never a tokenizer (RULER would size its samples with one the
    model was not trained on), and RULER's lengths a non-empty list of positive token counts."""
    if metadata is None:
        return
    if any(not isinstance(k, str) for k in metadata):
        fail("eval_task_metadata", f"must map names to values, got keys {quote(list(metadata))}.")
    given = [k for k in ("tokenizer", "pretrained", "model") if k in metadata]
    if given:
        fail("eval_task_metadata", f"sets {', '.join(given)}, but eval.py hands lm-eval the run's own tokenizer "
             "(RULER sizes its samples with it); remove the key.")
    lengths = metadata.get("max_seq_lengths")
    if lengths is not None and not (isinstance(lengths, list) and lengths and all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths)):
        fail("eval_task_metadata", f"max_seq_lengths must be a non-empty list of positive token counts, e.g. "
             f"[64, 128, 256], got {quote(lengths)}.")


_SUFFIX = {"prefix": ".bin"}  # a dataset prefix's files are PREFIX.bin and PREFIX.idx


def _check_paths(args, fail) -> None:
    """Every path-valued key (groups.py's `path=`) the filesystem can hold: no NUL byte, each name no
    longer than its NAME_MAX, the whole no longer than PATH_MAX, so no run stops at its first write
    with `OSError: File name too long`."""
    for f in dataclasses.fields(args):
        kind, value = f.metadata.get("path"), getattr(args, f.name)
        if kind is None or value is None or f.name not in args.config_sources:
            continue
        entries = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, entry in entries:
            key = f.name if i is None else f"{f.name}[{i}]"
            if not isinstance(entry, str):
                fail(key, f"must be a path (a string), got {quote(entry)}.")
            if problem := path_problem(entry, _SUFFIX.get(kind, "")):
                fail(key, problem)
