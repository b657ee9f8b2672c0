"""Choose the target, write the folder: weights, config, code (custom only) and tokenizer files."""
import contextlib
import os
import pathlib
import re
import shutil
import tempfile

from megatron.model.layer_pattern import pattern_methods
from megatron.output_paths import new_folder_problem, reported_write

from .custom import package_files, write_custom
from .errors import ExportError
from .native import build_gpt_neox, native_problems
from .source import Source, load_source
from .tokenizer import export_tokenizer

TARGETS = ("auto", "gpt_neox", "custom")


def resolve_target(config, target: str) -> str:
    """`auto`: GPT-NeoX when it holds the whole model `config` (a ModelConfig), else the custom folder."""
    if target not in TARGETS:
        raise ExportError(f"--target {target!r} is not one of {', '.join(TARGETS)}.")
    problems = native_problems(config)
    if target == "gpt_neox" and problems:
        raise ExportError("--target gpt_neox cannot hold this model: " + "; ".join(problems) + ". Export it with "
                          "--target custom (or auto), which writes a folder that loads with trust_remote_code=True.")
    if target == "custom":  # the methods' files can be carried (ExportError otherwise)
        package_files(pattern_methods(config.pos_emb, config.layers))
    if target == "auto":
        return "gpt_neox" if not problems else resolve_target(config, "custom")
    return target


def export_model(source: Source, output_dir, target: str = "auto") -> str:
    """Write `source` as a Hugging Face folder in `output_dir`; returns the target used."""
    target = resolve_target(source.model.config, target)
    out = pathlib.Path(output_dir)
    check_output_dir(out)
    # Written in a hidden folder beside it, renamed into place when complete: a failed export leaves no
    # half-written folder that looks like a model (rename replaces only an empty folder).
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = pathlib.Path(tempfile.mkdtemp(prefix=".export-partial-", dir=out.parent))
    try:
        with safetensors_errors_as_os_errors():
            if target == "gpt_neox":
                build_gpt_neox(source).save_pretrained(str(partial))
            else:
                write_custom(source, partial)
        export_tokenizer(source.tokenizer, partial)
        mask = os.umask(0)
        os.umask(mask)
        partial.chmod(0o777 & ~mask)  # mkdtemp makes 0700; the folder gets the usual permissions
        for path in partial.rglob("*"):  # and every file (safetensors writes its weights 0600)
            if path.is_file():
                path.chmod(0o666 & ~mask)
        try:
            os.rename(partial, out)
        except OSError as err:  # something appeared at --output_dir while exporting
            raise ExportError(f"--output_dir {out} was filled by something else while exporting ({err.strerror}); "
                              "nothing was overwritten: export again into a new folder.") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


@contextlib.contextmanager
def safetensors_errors_as_os_errors():
    """safetensors' writer reports a failed write (a full disk, a quota) as SafetensorError, not OSError, with the
    OS error only in its text ("... No space left on device (os error 28)"): turned back into the OSError it was,
    so the export's full-disk paragraph (reported_write) says it, not a traceback."""
    from safetensors import SafetensorError
    try:
        yield
    except SafetensorError as err:
        code = re.search(r"os error (\d+)", str(err))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1)))) from None


def check_output_dir(output_dir) -> None:
    """--output_dir must be a new or empty folder this process can create files in (nothing is overwritten)."""
    problem = new_folder_problem(output_dir)
    if problem:
        raise ExportError(f"--output_dir {problem}")


def export_checkpoint(input_dir, output_dir, config_files=None, target: str = "auto") -> str:
    check_output_dir(output_dir)  # before the checkpoint is loaded, not after
    source = load_source(input_dir, config_files)
    with reported_write(output_dir, "the Hugging Face export", "--output_dir"):
        return export_model(source, output_dir, target)
