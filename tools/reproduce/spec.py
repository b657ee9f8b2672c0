"""The sweep YAML: which methods, seeds and datasets, at which scale, evaluated how, reported where.

Read with the config files' own loader (megatron/neox_arguments/yaml_loader.py): `-` and `_` are the
same in keys, a key may appear once, `extends:` merges other sweep files first, and errors name the
file and line.
"""
import dataclasses
import pathlib

from megatron.neox_arguments import NeoXArgsError
from megatron.quoting import quote
from megatron.neox_arguments.yaml_loader import load_config_files, normalise_key

BYTE_LEVEL = {"tokenizer-type": "ByteLevelTokenizer"}


class SweepError(NeoXArgsError):
    """A sweep YAML that cannot be run as written."""


@dataclasses.dataclass
class Dataset:
    name: str
    prefix: str                   # the data-path: <dir>/<name>_text_document(.bin/.idx)
    tokenizer: dict               # NeoX tokenizer keys, for preprocessing and training alike
    builder: str | None = None    # "stdlib": tools/datasets/build_default_corpus.py builds it
    source: str | None = None     # a raw corpus tools/datasets/preprocess_data.py tokenizes
    stand_in: str | None = None   # dataset used instead when this one is not here (Pile -> stand-in)
    paper: str | None = None      # the paper's dataset printed beside this one

    def ready(self) -> bool:
        return all(pathlib.Path(self.prefix + ext).is_file() for ext in (".bin", ".idx"))


@dataclasses.dataclass
class Sweep:
    path: pathlib.Path
    name: str
    scale: str
    profile: list
    methods: list
    seeds: list
    datasets: list                # the grid's datasets (names in `data`)
    data: dict                    # name -> Dataset
    evaluation: dict              # NeoX evaluation keys of every run
    overrides: dict               # NeoX keys set on every run
    windowed_baseline: str | None
    variants: dict                # method -> [NeoX keys of one evaluation-only variant, ...]
    training_variants: dict       # method -> {label: NeoX keys of one separately trained variant}
    extensions: dict              # method -> {label: NeoX keys of a fine-tune of the method's plain run}
    chunk_subsets: list           # chunk counts the ablation report re-reads the scored chunks at
    ablation: dict | None         # {method, anchor, measure}: judge the training variants by ablation.py's rules
    claims: dict | None           # {reference, anchor, competitive, blow_up, bounded}: the methods claims.py judges
    ruler: dict | None            # {tasks, limit}: RULER tasks eval.py runs on every run at evaluation.eval-lengths
    kernel_figures: list
    position_length: int | None
    position_methods: list
    work_dir: pathlib.Path
    report_dir: pathlib.Path
    commentary: pathlib.Path | None
    jobs: int
    threads: int

    @property
    def reference(self) -> str:
        """The method Table 3, the probe and RULER tables and the claims compare every other with: the claims'
        reference, else kerple_log where the grid has it (the runner's first study), else the first method."""
        if self.claims:
            return self.claims["reference"]
        return "kerple_log" if "kerple_log" in self.methods else self.methods[0]


SWEEP_KEYS = {"name", "scale", "profile", "methods", "seeds", "datasets", "data", "evaluation", "set",
              "windowed_baseline", "variants", "kernel_figures", "position_length", "position_methods", "work_dir",
              "report_dir", "commentary", "jobs", "threads", "training_variants", "extensions", "chunk_subsets", "ablation",
              "ruler", "claims"}
REQUIRED = ("name", "scale", "profile", "methods", "seeds", "datasets", "data", "evaluation")
DATASET_KEYS = {"prefix", "tokenizer", "builder", "source", "stand_in", "paper"}


def load_sweep(path) -> Sweep:
    path = pathlib.Path(path)
    if not path.is_file():
        problem = "is a directory, not a sweep file" if path.is_dir() else "does not exist"
        raise SweepError(f"sweep file {path} {problem}; give one of configs/reproduce/*.yml")
    spelled, sources, _ = load_config_files([path])
    spec = {normalise_key(k): v for k, v in spelled.items()}

    def fail(key, message):
        where = sources.get(normalise_key(key.split(".")[0]), str(path))
        raise SweepError(f"{where}: `{key}`: {message}")

    unknown = sorted(set(spec) - SWEEP_KEYS)
    if unknown:
        fail(unknown[0], f"unknown key; the sweep keys are {', '.join(sorted(SWEEP_KEYS))}")
    for key in REQUIRED:
        if not spec.get(key):
            fail(key, "is required and must not be empty")
    data = {name: _dataset(name, entry, fail) for name, entry in spec["data"].items()}
    for name in spec["datasets"]:
        if name not in data:
            fail("datasets", f"{name!r} is not defined under `data` (defined: {', '.join(data)})")
    for name, dataset in data.items():
        if dataset.stand_in and dataset.stand_in not in data:
            fail(f"data.{name}.stand_in", f"{dataset.stand_in!r} is not defined under `data`")
    from megatron.neox_arguments.groups import POS_EMB_CHOICES
    for method in spec["methods"]:
        if method not in POS_EMB_CHOICES:
            fail("methods", f"{method!r} is not a pos-emb; choose from {', '.join(POS_EMB_CHOICES)}")
    if not all(isinstance(s, int) for s in spec["seeds"]):
        fail("seeds", "must be a list of integers")
    windowed = spec.get("windowed_baseline")
    if windowed and windowed not in spec["methods"]:
        fail("windowed_baseline", f"{windowed!r} must be one of the grid's methods")
    variants = _variants(spec.get("variants") or {}, spec["methods"], fail)
    training_variants = _training_variants(spec.get("training_variants") or {}, spec["methods"], fail)
    extensions = _extensions(spec.get("extensions") or {}, spec["methods"], training_variants, fail)
    evaluation = {normalise_key(k): v for k, v in spec["evaluation"].items()}
    position_length = spec.get("position_length")
    if position_length and position_length not in (evaluation.get("eval_lengths") or []):
        fail("position_length", f"{position_length} must be one of evaluation.eval-lengths")
    if position_length and "position" not in (evaluation.get("eval_modes") or []):
        fail("position_length", "needs `position` in evaluation.eval-modes")
    chunk_subsets = spec.get("chunk_subsets") or []
    if chunk_subsets and not (all(isinstance(n, int) and n > 1 for n in chunk_subsets)
                              and isinstance(evaluation.get("eval_chunks"), int)
                              and max(chunk_subsets) < evaluation["eval_chunks"]):
        fail("chunk_subsets", "must be whole numbers above 1 and below evaluation.eval-chunks (the subsets are "
             "drawn from the chunks every run scored)")
    ablation = _ablation(spec.get("ablation"), spec["methods"], training_variants, evaluation, fail)
    ruler = _ruler(spec.get("ruler"), evaluation, fail)
    claims = _claims(spec.get("claims"), spec["methods"], POS_EMB_CHOICES, fail)
    return Sweep(
        path=path, name=spec["name"], scale=" ".join(str(spec["scale"]).split()), profile=list(spec["profile"]),
        methods=list(spec["methods"]), seeds=list(spec["seeds"]), datasets=list(spec["datasets"]), data=data,
        evaluation=evaluation, overrides={normalise_key(k): v for k, v in (spec.get("set") or {}).items()},
        windowed_baseline=windowed, variants=variants, training_variants=training_variants, extensions=extensions,
        chunk_subsets=sorted(chunk_subsets), ablation=ablation, claims=claims, ruler=ruler,
        kernel_figures=list(spec.get("kernel_figures") or []),
        position_length=position_length, position_methods=list(spec.get("position_methods") or []),
        work_dir=pathlib.Path(spec.get("work_dir", f"runs/reproduce/{spec['name']}")),
        report_dir=pathlib.Path(spec.get("report_dir", f"runs/reproduce/{spec['name']}/report")),
        commentary=pathlib.Path(spec["commentary"]) if spec.get("commentary") else None,
        jobs=int(spec.get("jobs", 1)), threads=int(spec.get("threads", 1)))


def _dataset(name, entry, fail) -> Dataset:
    if not isinstance(entry, dict) or set(map(normalise_key, entry)) - DATASET_KEYS:
        fail(f"data.{name}", f"must be a mapping with keys among {', '.join(sorted(DATASET_KEYS))}")
    entry = {normalise_key(k): v for k, v in entry.items()}
    prefix = entry.get("prefix", f"data/{name}/{name}_text_document")
    if pathlib.Path(prefix).name != f"{name}_text_document":
        fail(f"data.{name}.prefix", f"{prefix!r} must end in '{name}_text_document' (evaluate.py names "
             "results after the data file, so the file name must be the dataset's name)")
    if entry.get("builder") not in (None, "stdlib"):
        fail(f"data.{name}.builder", "the only builder is 'stdlib' (the CPython library corpus)")
    return Dataset(name, prefix, dict(entry.get("tokenizer") or BYTE_LEVEL), entry.get("builder"),
                   entry.get("source"), entry.get("stand_in"), entry.get("paper"))


def _variants(given, methods, fail) -> dict:
    from megatron.model.positional_embeddings import per_run_options
    """`variants: {rotary: [{rotary-scaling: {type: yarn, factor: 32}}, ...]}`: each entry re-evaluates
    the method's checkpoints with these keys set (the method's per-run options), trained once."""
    if not isinstance(given, dict):
        fail("variants", "must map a method to a list of key mappings, e.g. "
             "{rotary: [{rotary-scaling: {type: linear, factor: 32}}]}")
    variants = {}
    for method, entries in given.items():
        if method not in methods:
            fail(f"variants.{method}", f"{method!r} must be one of the grid's methods ({', '.join(methods)})")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and e for e in entries):
            fail(f"variants.{method}", "must be a non-empty list of non-empty key mappings")
        variants[method] = [{normalise_key(k): v for k, v in entry.items()} for entry in entries]
        allowed = per_run_options(method)
        for entry in variants[method]:
            if set(entry) - set(allowed):
                # Anything else would change what was trained: that is a method of the grid, not a variant.
                fail(f"variants.{method}", f"{', '.join(sorted(set(entry) - set(allowed)))} cannot vary at "
                     f"evaluation; a variant sets only the method's per-run options "
                     f"({', '.join(o.replace('_', '-') for o in allowed) or f'{method} has none'})")
    return variants


# What runs.py's Run sets for every run, over any variant: a variant setting one would be silently replaced.
SWEEP_OWNED_KEYS = {"save", "load", "tensorboard_dir", "log_dir", "data_cache_path", "eval_results_dir", "data_path",
                    "train_data_paths", "valid_data_paths", "test_data_paths"}


def _training_variants(given, methods, fail) -> dict:
    """`training_variants: {kerple_log: {per-layer: {pos-emb-per-layer: true}, bf16: {precision: bf16}}}`:
    each entry is trained as a run of its own (its own folder, checkpoints and config hash) beside the
    method's plain run, and reported as `<method>+<label>` (judged as switches only with `ablation:`)."""
    from megatron.neox_arguments import NeoXArgs
    if not isinstance(given, dict):
        fail("training_variants", "must map a method to {label: {NeoX key: value, ...}}, e.g. "
             "{kerple_log: {per-layer: {pos-emb-per-layer: true}}}")
    keys, variants = set(NeoXArgs.user_keys()), {}
    for method, entries in given.items():
        if method not in methods:
            fail(f"training_variants.{method}", f"{method!r} must be one of the grid's methods ({', '.join(methods)})")
        if not isinstance(entries, dict) or not entries or not all(isinstance(e, dict) and e for e in entries.values()):
            fail(f"training_variants.{method}", "must map a label to a non-empty mapping of NeoX keys")
        variants[method] = {}
        for label, entry in entries.items():
            entry = _run_keys(f"training_variants.{method}", label, entry, keys, fail)
            if "pos_emb" in entry or "seed" in entry:
                fail(f"training_variants.{method}.{label}", "pos-emb and seed are the grid's own axes")
            if owned := sorted(set(entry) & SWEEP_OWNED_KEYS):
                named = ", ".join(k.replace("_", "-") for k in owned)
                fail(f"training_variants.{method}.{label}", f"{named}: the sweep "
                     "sets these for every run (its folders follow from the run's label, its data from the dataset), "
                     "so a variant's value would be replaced; leave them out")
            variants[method][label] = entry
    return variants


def _run_keys(where, label, entry, keys, fail) -> dict:
    """A training variant's or an extension's label and NeoX keys (normalised), checked alike: both are runs
    of their own, named by the label."""
    if not isinstance(label, str) or not label.replace("-", "").replace("+", "").isalnum():
        fail(where, f"label {label!r}: letters, digits, '-' and '+' only (it names the run's folder and result file)")
    entry = {normalise_key(k): v for k, v in entry.items()}
    if unknown := sorted(set(entry) - keys):
        fail(f"{where}.{label}", f"{unknown[0].replace('_', '-')} is not a config key")
    return entry


def _extensions(given, methods, training_variants, fail) -> dict:
    """`extensions: {rotary: {yarn-256: {seq-length: 256, train-iters: 100, rotary-scaling: {...}}}}`: each entry
    is a run of its own that fine-tunes the method's plain run of the same dataset and seed (`finetune: true`,
    `load` = that run's checkpoints) with the entry's keys, after that run finished; reported as
    `<method>+<label>` beside its base model's zero-shot result."""
    from megatron.neox_arguments import NeoXArgs
    example = ("{rotary: {yarn-256: {seq-length: 256, seq-length-val: 256, train-iters: 100, "
               "rotary-scaling: {type: yarn, factor: 4, original-max-position: 64}}}}")
    if not isinstance(given, dict):
        fail("extensions", f"must map a method to {{label: {{NeoX key: value, ...}}}}, e.g. {example}")
    keys, extensions = set(NeoXArgs.user_keys()), {}
    for method, entries in given.items():
        where = f"extensions.{method}"
        if method not in methods:
            fail(where, f"{method!r} is not one of the grid's methods ({', '.join(methods)}); an extension fine-tunes "
                 "the plain run of one of them, so list the method under `methods` or extend another")
        if not isinstance(entries, dict) or not entries or not all(isinstance(e, dict) and e for e in entries.values()):
            fail(where, f"must map a label to a non-empty mapping of NeoX keys, e.g. {example}")
        extensions[method] = {}
        for label, entry in entries.items():
            label = str(label) if isinstance(label, int) and not isinstance(label, bool) else label  # `256:`
            entry = _run_keys(where, label, entry, keys, fail)
            if label in training_variants.get(method, {}):
                fail(where, f"label {label!r} is also a training variant of {method}: both would be reported as "
                     f"`{method}+{label}`; give the extension another label")
            if "pos_emb" in entry or "seed" in entry:
                fail(f"{where}.{label}", "pos-emb and seed are those of the run it extends (the grid's own axes)")
            if owned := sorted(set(entry) & (SWEEP_OWNED_KEYS | {"finetune"})):
                named = ", ".join(k.replace("_", "-") for k in owned)
                fail(f"{where}.{label}", f"{named}: the sweep sets these for every extension (finetune: true, load: "
                     "the checkpoints of the plain run it extends; its own folders from its label), so leave them out")
            if "seq_length" not in entry:
                fail(f"{where}.{label}", "sets no seq-length: an extension trains its base model at a longer context; "
                     "give it seq-length (and seq-length-val), e.g. " + example)
            extensions[method][label] = entry
    return extensions


ABLATION_MEASURES = {"perplexity": "nonoverlap", "kv-retrieval": "kv-retrieval"}  # measure -> the eval-mode it reads


def _ablation(given, methods, training_variants, evaluation, fail) -> dict | None:
    """`ablation: {method: kerple_log, anchor: alibi, measure: perplexity}`: the report judges `method`'s
    training variants as switches of an ablation by the rules written before the runs (ablation.py), against
    `anchor`, another method of the grid; without it a sweep's training variants are compared with their parent
    method, with no verdicts."""
    if given is None:
        return None
    example = "{method: kerple_log, anchor: alibi, measure: perplexity}"
    if not isinstance(given, dict) or set(map(normalise_key, given)) - {"method", "anchor", "measure"}:
        fail("ablation", f"must be a mapping with keys method, anchor and (optional) measure, e.g. {example}")
    given = {normalise_key(k): v for k, v in given.items()}
    for key in ("method", "anchor"):
        if key not in given:
            fail("ablation", f"names no {key}: give the method whose training variants are judged and the anchor "
                 f"they are set against, e.g. {example}")
        if given[key] not in methods:
            fail(f"ablation.{key}", f"{given[key]!r} must be one of the grid's methods ({', '.join(methods)})")
    if given["anchor"] == given["method"]:
        fail("ablation.anchor", f"{given['anchor']!r} is the ablation's method: the anchor is another method of "
             "the grid that every variant is set against")
    if not training_variants.get(given["method"]):
        fail("ablation.method", f"{given['method']!r} has no training_variants: an ablation compares its "
             "training variants (the switches) with its plain run")
    measure = given.get("measure", "perplexity")
    if measure not in ABLATION_MEASURES:
        fail("ablation.measure", f"{measure!r}: choose perplexity or kv-retrieval")
    if ABLATION_MEASURES[measure] not in (evaluation.get("eval_modes") or ["nonoverlap"]):
        fail("ablation.measure", f"{measure} is read from the {ABLATION_MEASURES[measure]} records: add "
             f"{ABLATION_MEASURES[measure]} to evaluation.eval-modes")
    return {**given, "measure": measure}


CLAIM_ROLES = {"reference": str, "anchor": str, "competitive": str, "blow_up": list, "bounded": list}


def _claims(given, methods, pos_embs, fail) -> dict | None:
    """`claims: {reference: kerple_log, anchor: alibi, competitive: t5, blow-up: [sinusoidal, rotary], bounded:
    [alibi, t5, kerple_log, kerple_power]}`: the report judges the paper's four claims (claims.py) with these
    methods in their roles; a method the grid lacks makes its claim *not assessed*. Without it, no claims."""
    if given is None:
        return None
    example = ("{reference: kerple_log, anchor: alibi, competitive: t5, blow-up: [sinusoidal, rotary], "
               "bounded: [alibi, t5, kerple_log, kerple_power]}")
    if not isinstance(given, dict) or set(map(normalise_key, given)) != set(CLAIM_ROLES):
        fail("claims", f"must be a mapping with the keys {', '.join(k.replace('_', '-') for k in CLAIM_ROLES)}, "
             f"e.g. {example}")
    given = {normalise_key(k): v for k, v in given.items()}
    for role, kind in CLAIM_ROLES.items():
        where, named = f"claims.{role.replace('_', '-')}", given[role] if kind is list else [given[role]]
        if not isinstance(given[role], kind) or not named:
            fail(where, f"must be {'a non-empty list of methods' if kind is list else 'one method'}, e.g. {example}")
        for method in named:
            if method not in pos_embs:
                fail(where, f"{quote(method)} is not a pos-emb; choose from {', '.join(pos_embs)}")
    if given["reference"] not in methods:
        fail("claims.reference", f"{quote(given['reference'])} must be one of the grid's methods "
             f"({', '.join(methods)}): Table 3 and the claims compare every method with it")
    return {role: tuple(v) if isinstance(v, list) else v for role, v in given.items()}


RULER_LIMIT = 20  # samples per length when `ruler.limit` is not given


def _ruler(given, evaluation, fail) -> dict | None:
    """`ruler: {tasks: [niah_single_1], limit: 20}`: eval.py runs these RULER tasks on every run's final
    checkpoint at evaluation.eval-lengths, `limit` samples per length (the same samples for every run), and
    the report shows their effective lengths beside perplexity's. The tasks whose data is downloaded on every
    run are refused here; the essay tasks run where their data is on the machine (eval.py says otherwise)."""
    from megatron.evaluation.ruler import DOWNLOADED, RULER_TASKS, SYNTHETIC
    if given is None:
        return None
    example = "{tasks: [niah_single_1, niah_multikey_2], limit: 20}"
    if not isinstance(given, dict) or set(map(normalise_key, given)) - {"tasks", "limit"}:
        fail("ruler", f"must be a mapping with keys tasks and (optional) limit, e.g. {example}")
    given = {normalise_key(k): v for k, v in given.items()}
    tasks, limit = given.get("tasks"), given.get("limit", RULER_LIMIT)
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        fail("ruler.tasks", f"must be a non-empty list of RULER task names, e.g. {example}")
    for task in tasks:
        if task in DOWNLOADED:
            fail("ruler.tasks", f"{task!r}: lm-eval 0.4.13 downloads its data on every run, and the sweep's "
                 f"eval.py runs offline; the RULER tasks that need no data are {', '.join(SYNTHETIC)}")
        if task not in RULER_TASKS:
            fail("ruler.tasks", f"{quote(task)} is not one of lm-eval 0.4.13's RULER tasks "
                 f"({', '.join(t for t in RULER_TASKS if t not in DOWNLOADED)})")
    if len(set(tasks)) != len(tasks):
        fail("ruler.tasks", "names a task twice")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        fail("ruler.limit", f"must be a positive whole number of samples per length, got {quote(limit)}")
    if not evaluation.get("eval_lengths"):
        fail("ruler", "needs evaluation.eval-lengths: the RULER tasks run at those lengths")
    return {"tasks": list(tasks), "limit": limit}
