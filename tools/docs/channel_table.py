#!/usr/bin/env python
"""Print the positional protocol's table (Markdown) from the code, for docs/architecture.md.

`python tools/docs/channel_table.py` prints it; `--write` replaces the copy in docs/architecture.md (between the
CHANNEL-TABLE markers); `--check` fails when that copy is out of date. The rows are the protocol methods every
method is asked for and the channels of base.py's CHANNELS; the methods of each row are the registered methods
(built at a tiny size) that override the protocol method or name the channel, and the wrappers and options that
add one.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from megatron.model.positional_embeddings import ModelShape, available, lookup  # noqa: E402
from megatron.model.positional_embeddings.base import CHANNELS, PositionalEmbedding  # noqa: E402
from megatron.model.positional_embeddings.dape import daped  # noqa: E402
from megatron.model.positional_embeddings.temperature import tempered  # noqa: E402
from tools.docs.generated_table import table_cli  # noqa: E402

PAGE = "docs/architecture.md"
BEGIN, END = "<!-- CHANNEL-TABLE:BEGIN -->", "<!-- CHANNEL-TABLE:END -->"
SHAPE = ModelShape(num_heads=4, head_dim=8, hidden_size=32, max_positions=64)
# Asked of every method, a no-op by default: protocol method -> what it is for.
ALWAYS = {"add_to_embeddings": "absolute positions added to the token embeddings",
          "rotate_qk": "a transform of q and k (with `rotation_tables` for a rotation by cos/sin tables)",
          "distance_tables": "per-head bias and score weight over distances d = i - j"}


def variants() -> dict:
    """What names a channel beyond a method's defaults: a wrapper or an option, built over a method."""
    kerple, path = lookup("kerple_log")(SHAPE), lookup("path")
    return {"`attention-temperature: {type: ssmax}`": tempered(kerple, {"type": "ssmax"}),
            "`dape`": daped(kerple, {"version": 1}),
            "`dape` (`form: authors`)": daped(kerple, {"version": 2, "form": "authors"}),
            "`path` (`path-forget-gate`)": path(SHAPE, path.Options(path_forget_gate=True))}


def table() -> str:
    methods = {f"`{name}`": lookup(name)(SHAPE) for name in available()}
    rows = ["| channel (in `channels`) | protocol method | for | methods |", "|---|---|---|---|"]
    for method, what in ALWAYS.items():
        users = [name for name, pe in methods.items()
                 if getattr(type(pe), method) is not getattr(PositionalEmbedding, method)]
        rows.append(f"| — (always asked) | `{method}` | {what} | {', '.join(users)} |")
    every = {**methods, **variants()}
    for name, channel in CHANNELS.items():
        users = [label for label, pe in every.items() if name in pe.channels]
        rows.append(f"| `{name}` | `{channel.method}` | {channel.description} | {', '.join(users)} |")
    return "\n".join(rows) + "\n"


def main():
    return table_cli(__doc__, table, PAGE, BEGIN, END, "tools/docs/channel_table.py", "channel table")


if __name__ == "__main__":
    sys.exit(main())
