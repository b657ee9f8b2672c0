"""A new evaluation mode is one new file: docs/evaluation.md's example mode, saved into a folder of its own (named
by NEOX_EVAL_MODES_PATH), is accepted by the config, run by evaluate.py on a tiny checkpoint, written
into the result file and read by the table tool, with no other edit anywhere."""
import re

import pytest

from megatron.evaluation.modes import EvalModeError, get_mode, mode_names, register


def test_the_registry_refuses_duplicates_and_names_what_it_has():
    # the shipped modes, in their order; a mode a reader added (docs/evaluation.md) comes after them
    assert mode_names()[:5] == ("nonoverlap", "sliding", "position", "kv-retrieval", "passkey")
    with pytest.raises(EvalModeError, match="evaluation mode 'nonoverlap' is registered twice"):
        register("nonoverlap", "again")(lambda context: {})
    with pytest.raises(EvalModeError, match=re.escape("unknown evaluation mode 'no-such-mode'; the registered modes "
                                                      f"are {', '.join(mode_names())}")):
        get_mode("no-such-mode")
