#!/usr/bin/env python
"""Print the sequence-parallel compatibility table (Markdown) from the methods' own declarations.

`python tools/docs/sequence_parallel_table.py` prints it; `--write` replaces the copy in docs/training.md
(between the SEQUENCE-PARALLEL-TABLE markers); `--check` fails when that copy is out of date. Each row is a
registered method (or a wrapper over kerple_log) built at a tiny size; megatron/model/head_split.py reads
its declarations (`mixes_heads`, the channels it implements) into how it runs with its heads split over ranks.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from megatron.model.head_split import how_it_runs  # noqa: E402
from megatron.model.positional_embeddings import ModelShape, available, lookup  # noqa: E402
from megatron.model.positional_embeddings.dape import daped  # noqa: E402
from megatron.model.positional_embeddings.temperature import tempered  # noqa: E402
from tools.docs.generated_table import table_cli  # noqa: E402

PAGE = "docs/training.md"
BEGIN, END = "<!-- SEQUENCE-PARALLEL-TABLE:BEGIN -->", "<!-- SEQUENCE-PARALLEL-TABLE:END -->"
SHAPE = ModelShape(num_heads=4, head_dim=8, hidden_size=32, max_positions=64)


def table() -> str:
    rows = ["| method | with `sequence-parallel-size` > 1 |", "|---|---|"]
    for name in available():
        rows.append(f"| `{name}` | {how_it_runs(lookup(name)(SHAPE))} |")
    wrappers = {"`attention-temperature: {type: ssmax}` over `kerple_log`":
                tempered(lookup("kerple_log")(SHAPE), {"type": "ssmax"}),
                "`dape` over any method": daped(lookup("kerple_log")(SHAPE), {"version": 1})}
    for label, pe in wrappers.items():
        rows.append(f"| {label} | {how_it_runs(pe)} |")
    return "\n".join(rows) + "\n"


def main():
    return table_cli(__doc__, table, PAGE, BEGIN, END, "tools/docs/sequence_parallel_table.py", "sequence-parallel table")


if __name__ == "__main__":
    sys.exit(main())
