"""The benchmarks' `--methods name:key=value` rows: a method timed with its own settings beside the others."""
import pytest

from benchmarks.measure import method_settings
from megatron.neox_arguments import NeoXArgs, NeoXArgsError


def test_a_row_names_its_method_and_its_own_settings():
    assert method_settings("path") == ("path", {})
    assert method_settings("path:path-forget-gate=true") == ("path", {"path_forget_gate": True})
    name, settings = method_settings("rotary:rotary-unrotated-fraction=0.25,rotary-emb-base=500000")
    assert name == "rotary" and settings == {"rotary_unrotated_fraction": 0.25, "rotary_emb_base": 500000}
    args = NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, **settings, "pos-emb": name})
    assert args.rotary_unrotated_fraction == 0.25


def test_a_setting_another_method_owns_is_the_configs_own_refusal():
    name, settings = method_settings("kerple_log:path-forget-gate=true")
    with pytest.raises(NeoXArgsError, match=r"path-forget-gate: is set, but pos-emb is 'kerple_log', which has no "
                                            r"such option \(only path does\)"):
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, **settings, "pos-emb": name})
