"""Choose the target, write the folder: weights, config, code (custom only) and tokenizer files."""
import pathlib

from .custom import exportable_methods, write_custom
from .errors import ExportError
from .native import build_gpt_neox, native_problems
from .source import Source, load_source
from .tokenizer import export_tokenizer

TARGETS = ("auto", "gpt_neox", "custom")


def resolve_target(neox_args, target: str) -> str:
    """`auto`: GPT-NeoX when it holds the whole model, else the custom folder."""
    if target not in TARGETS:
        raise ExportError(f"--target {target!r} is not one of {', '.join(TARGETS)}.")
    problems = native_problems(neox_args)
    if target == "gpt_neox" and problems:
        raise ExportError("--target gpt_neox cannot hold this model: " + "; ".join(problems) + ". Export it with "
                          "--target custom (or auto), which writes a folder that loads with trust_remote_code=True.")
    if target == "custom" and neox_args.pos_emb not in exportable_methods():
        raise ExportError(f"pos-emb {neox_args.pos_emb!r} has no Hugging Face template (tools/ckpts/hf_export/"
                          f"templates/positional/); methods with one: {', '.join(exportable_methods())}. Add "
                          f"templates/positional/{neox_args.pos_emb}.py implementing its formula.")
    if target == "auto":
        return "gpt_neox" if not problems else resolve_target(neox_args, "custom")
    return target


def export_model(source: Source, output_dir, target: str = "auto") -> str:
    """Write `source` as a Hugging Face folder in `output_dir`; returns the target used."""
    target = resolve_target(source.neox_args, target)
    out = pathlib.Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--output_dir {out} exists and is not empty; give a new folder (nothing is overwritten).")
    out.mkdir(parents=True, exist_ok=True)
    if target == "gpt_neox":
        build_gpt_neox(source).save_pretrained(str(out))
    else:
        write_custom(source, out)
    export_tokenizer(source.tokenizer, out)
    return target


def export_checkpoint(input_dir, output_dir, config_files=None, target: str = "auto") -> str:
    return export_model(load_source(input_dir, config_files), output_dir, target)
