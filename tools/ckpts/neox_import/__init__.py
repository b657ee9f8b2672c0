"""GPT-NeoX / KERPLE-fork checkpoints -> this project's (tools/ckpts/import_neox.py is the command).

layout.py reads DeepSpeed's pipeline files, positional.py maps each positional method, convert.py maps
the rest, write.py writes the checkpoint as this project's save does.
"""
import dataclasses
import pathlib

from megatron.model.model_config import ARCHITECTURE_KEYS
from megatron.model import GPTModel
from megatron.model.positional_embeddings import checkpoint_options
from megatron.neox_arguments import POS_EMB_ALIASES, NeoXArgs, NeoXArgsError
from megatron.neox_arguments.upstream_compat import VALUE_MAPS
from megatron.neox_arguments.yaml_loader import load_config_files, normalise_key
from .convert import convert
from .layout import CheckpointImportError, checkpoint_folder, read_stages, saved_configs
from .positional import SUPPORTED
from .write import output_problem, write_checkpoint

BIAS_METHODS = ("t5", "alibi", "kerple_log", "kerple_power", "kerple_bias_weight")


def resolve_config(folder: pathlib.Path, config_files, pos_emb: str | None, overrides: dict | None) -> NeoXArgs:
    """The run's config as this project's args: --config_file, else the checkpoint's configs/*.yml."""
    paths = [pathlib.Path(p) for p in config_files] if config_files else saved_configs(folder)
    if not paths:
        raise CheckpointImportError(
            f"{folder} has no configs/ folder with the run's config files, and no --config_file was given. Pass "
            "the files the run was trained with: --config_file local_setup.yml train.yml RUN.yml.")
    overrides = dict(overrides or {})
    if pos_emb:
        overrides["pos-emb"] = pos_emb
    loaded, sources, _ = load_config_files(paths)
    values = {normalise_key(k): v for k, v in loaded.items()}
    _refuse_contradictions(paths, values, sources, {normalise_key(k): v for k, v in overrides.items()}, pos_emb)
    named = {normalise_key(k) for k in overrides} | set(values)
    if "pos_emb" not in named:
        raise CheckpointImportError(
            f"the config ({', '.join(map(str, paths))}) does not name pos-emb, and the weights cannot say which "
            "method the run used (KERPLE-log and -power store the same parameters). Pass --pos-emb NAME (the "
            "fork's: learned, rotary, sinusoidal, rpe, alibi, kerple_log, kerple_power_ap_).")
    args = NeoXArgs.from_ymls(paths, overrides, world_size=1)
    if values.get("apply_query_key_layer_scaling") and args.pos_emb in BIAS_METHODS:
        # NeoX then multiplies the scores, position bias included, by the layer number before the
        # softmax: a different model, not a rounding detail, for every method that adds a bias.
        raise CheckpointImportError(
            f"the config sets apply-query-key-layer-scaling with pos-emb {args.pos_emb}: NeoX then scales the "
            "positional bias by each layer's number before the softmax, which this project's model does not "
            "do, so the import would be a different model. It cannot be imported.")
    if args.activation != "gelu" or args.norm != "layernorm":
        raise CheckpointImportError(
            f"the config has activation {args.activation!r} and norm {args.norm!r}; the importer converts the "
            "fork's gelu MLP and LayerNorm only (its RMSNorm and gated MLPs name and lay out weights differently).")
    return args


def _refuse_contradictions(paths, values: dict, sources: dict, given: dict, pos_emb_flag: str | None) -> None:
    """--pos-emb and --set may fill in what the run's config leaves out, never contradict what it says
    about the model: the architecture keys and the method's own options (what a checkpoint must agree
    on, megatron/checkpoint/checkpointing.py). The weights cannot always tell (KERPLE-log and -power store the same
    parameters; T5's max distance and most options store none), so a contradiction would import another
    model than the run trained, silently. A method name the importer does not know is left to the checks
    after this one, which say what it knows."""
    method = _method_name(given.get("pos_emb", values.get("pos_emb")))
    watched = set(ARCHITECTURE_KEYS) | (set(checkpoint_options(method)) if method in SUPPORTED else set())
    for key in sorted(watched & set(given) & set(values)):
        ours, theirs = given[key], values[key]
        if key == "pos_emb":
            if _method_name(ours) not in SUPPORTED or _method_name(ours) == _method_name(theirs):
                continue
        elif ours == theirs or str(ours) == str(theirs):
            continue
        name = key.replace("_", "-")
        flag, leave_out = ((f"--pos-emb {pos_emb_flag}", "--pos-emb") if key == "pos_emb" and pos_emb_flag
                           else (f"--set {name}={ours}", "that --set"))
        why = (" The weights cannot tell which is right (KERPLE-log and -power store the same parameters),"
               if key == "pos_emb" else "")
        raise CheckpointImportError(
            f"{flag} disagrees with the run's config: {sources.get(key, ', '.join(map(str, paths)))} says "
            f"{name} {theirs}.{why} Importing with {name} {ours} would build another model than the run trained. "
            f"Leave out {leave_out} to import what the config names; if the config is wrong, pass corrected "
            "files with --config_file.")


def _method_name(name) -> str:
    """This project's name of a positional method, from any spelling a config may use (the fork's,
    upstream's, an alias); an unknown name stays as it is."""
    name = str(name)
    try:
        name = VALUE_MAPS["pos_emb"](name, "pos-emb")
    except NeoXArgsError:
        pass  # a name the config loader refuses with its own message later
    return POS_EMB_ALIASES.get(name, name)


def _check_stored_args(stages, args: NeoXArgs, rows: int) -> None:
    """The sizes DeepSpeed's model-states file recorded must be the config's."""
    stored = stages.args
    ours = {"num_layers": args.num_layers, "hidden_size": args.hidden_size,
            "num_attention_heads": args.num_attention_heads, "padded_vocab_size": rows}
    if args.pos_emb == "learned":
        ours["max_position_embeddings"] = args.max_position_embeddings
    differ = [f"{k}: checkpoint {stored[k]}, config {v}" for k, v in ours.items() if k in stored and stored[k] != v]
    if stored.get("model_parallel_size", 1) != 1:
        differ.append(f"model_parallel_size: checkpoint {stored['model_parallel_size']} (only 1 is imported)")
    if differ:
        raise CheckpointImportError(
            f"{stages.folder}/mp_rank_00_model_states.pt records sizes the config does not have: {'; '.join(differ)}. "
            "Pass the run's own config with --config_file.")


def load_fork(source, config_files=None, pos_emb=None, overrides=None):
    """(args, model with the imported weights, weights, notes, stages) without writing anything."""
    folder = checkpoint_folder(source)
    args = resolve_config(folder, config_files, pos_emb, overrides)
    stages = read_stages(folder, args.num_layers, args.no_weight_tying)
    if "word_embeddings.weight" not in stages.embedding:
        raise CheckpointImportError(f"{folder}/layer_00-model_00-model_states.pt has no word_embeddings.weight; it "
                                    "is not the embedding stage of a GPT-NeoX checkpoint.")
    rows = stages.embedding["word_embeddings.weight"].shape[0]
    _check_stored_args(stages, args, rows)
    model = GPTModel(dataclasses.replace(args.model, padded_vocab_size=rows))
    weights, notes = convert(args, stages, model)
    model.load_state_dict(weights)
    return args, model, weights, notes, stages


def import_checkpoint(source, output, config_files=None, pos_emb=None, overrides=None):
    """Convert and write; returns (the written global_stepN folder, notes). OUT must be a new or empty
    folder (write.output_problem), checked before anything is read."""
    problem = output_problem(output)
    if problem:
        raise CheckpointImportError(problem)
    args, model, weights, notes, stages = load_fork(source, config_files, pos_emb, overrides)
    provenance = {"source": str(pathlib.Path(source).resolve()), "format": "gpt-neox pipeline (DeepSpeed)",
                  "stored_dtype": str(next(iter(stages.final_norm.values())).dtype), "notes": notes}
    return write_checkpoint(output, args, model, weights, stages.iteration, provenance), notes


__all__ = ["CheckpointImportError", "import_checkpoint", "load_fork", "resolve_config"]
