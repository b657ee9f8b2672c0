"""What make_tables prints after Table 3 when its folders hold RULER results (eval.py's lm_eval/): the RULER
table (ruler_table.py) and the effective-length table (effective_length.py, default threshold and factor)."""
import glob
import pathlib

from .effective_length import PPL_FACTOR, THRESHOLD, estimates, render_table
from .ruler_table import load_ruler, ruler_tables


def result_folders(paths) -> list[pathlib.Path]:
    """The folders among make_tables' RESULTS arguments (globs expanded), each once, in the order given."""
    folders = []
    for given in paths:
        for match in (sorted(glob.glob(given)) if glob.has_magic(given) else [given]):
            folder = pathlib.Path(match)
            if folder.is_dir() and folder not in folders:
                folders.append(folder)
    return folders


def long_context_tables(paths, reference: str = "kerple_log", alpha: float = 0.05) -> str:
    """The two tables as markdown, or "" when no folder of `paths` has RULER results."""
    folders = result_folders(paths)
    documents = [document for folder in folders for document in load_ruler(folder)]
    if not documents:
        return ""
    by_measure = {}
    for folder in folders:
        for measure, per_method in estimates(folder, THRESHOLD, PPL_FACTOR).items():
            by_measure.setdefault(measure, {}).update(per_method)
    return ("\n" + ruler_tables(documents, reference, alpha) + "\n"
            + render_table(by_measure, THRESHOLD, PPL_FACTOR) + "\n")
