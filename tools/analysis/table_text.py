"""What every table writer prints of a name or value read from a result file: Markdown cells and TeX text
escaped here, once. A run's name comes from a config anyone could write (or an old result file): a `|`
would split a column and a line break start a row of its own, so a forged row could sit above the real
numbers. Names are also checked when a run is configured (one printable line, at most 100 characters);
this keeps tables honest for files written before that check or by hand."""

CELL_LIMIT = 200  # characters a cell shows of one value (a name is at most 100 when configured)


def md_cell(value) -> str:
    """`value` as one Markdown table cell: `|` and `\\` escaped, control characters (line breaks, tabs)
    written as their escape sequences, cut at CELL_LIMIT characters."""
    text = str(value)
    if len(text) > CELL_LIMIT:
        text = text[:CELL_LIMIT] + "…"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text.replace("\\", "\\\\").replace("|", "\\|")


def md_row(cells) -> str:
    """One Markdown table row of escaped cells."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
                "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_text(value) -> str:
    """`value` as plain TeX text: TeX's special characters escaped, control characters written out, cut as md_cell."""
    text = str(value)
    if len(text) > CELL_LIMIT:
        text = text[:CELL_LIMIT] + "…"
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return "".join(_TEX_SPECIAL.get(c, c) for c in text)
