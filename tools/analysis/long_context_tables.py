"""What make_tables prints after Table 3 when the folder holds RULER results (eval.py's lm_eval/): the RULER
table (ruler_table.py) and the effective-length table (effective_length.py, default threshold and factor)."""
from .effective_length import PPL_FACTOR, THRESHOLD, estimates, render_table
from .ruler_table import load_ruler, ruler_tables


def long_context_tables(folder, reference: str = "kerple_log", alpha: float = 0.05) -> str:
    """The two tables as markdown, or "" when `folder` has no RULER results."""
    documents = load_ruler(folder)
    if not documents:
        return ""
    return ("\n" + ruler_tables(documents, reference, alpha) + "\n"
            + render_table(estimates(folder, THRESHOLD, PPL_FACTOR), THRESHOLD, PPL_FACTOR) + "\n")
