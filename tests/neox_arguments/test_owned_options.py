"""Options an owner declares (an evaluation mode, the probe training mix) become config keys and are
checked by their declarations (megatron/neox_arguments/owned_options.py). The probes' own messages
through the config: tests/probes/test_probes.py, test_kv_retrieval.py, test_probe_mix.py."""
from dataclasses import dataclass

import pytest

from megatron.model.positional_embeddings import OptionError, option
from megatron.neox_arguments import NeoXArgsError
from megatron.neox_arguments.owned_options import check_owned, owned_options


def positive(n):
    return None if n > 0 else f"must be a positive integer, got {n}."


@dataclass
class Shared:
    width: int = option(4, "How wide.", check=positive)


@dataclass
class Extended(Shared):
    depth: int = option(2, "How deep.")

    def __post_init__(self):
        if self.depth > self.width:
            raise OptionError("depth", f"is {self.depth}, deeper than width {self.width}.")


@dataclass
class Other:
    width: int = option(8, "Wider.")


def test_owners_share_a_key_only_by_sharing_its_declaration():
    assert [o.name for o in owned_options([("a", Shared), ("b", Extended), ("c", None)])] == ["width", "depth"]
    with pytest.raises(NeoXArgsError, match=r"^c declares option width \(default 8\), which a already declares "
                                            r"differently \(default 4\)"):
        owned_options([("a", Shared), ("c", Other)])


def test_a_plain_field_is_refused():
    @dataclass
    class Plain:
        width: int = 3
    with pytest.raises(NeoXArgsError, match=r"^p: option width of \S*Plain is a plain field; declare it with option"):
        owned_options([("p", Plain)])


@pytest.mark.parametrize("values, failure", [
    ({"width": 0, "depth": 0}, ("width", "must be a positive integer, got 0.")),  # the key's own check
    ({"width": 2, "depth": 3}, ("depth", "is 3, deeper than width 2.")),         # the keys together
    ({"width": 2, "depth": 2}, None),
])
def test_check_owned_runs_each_check_then_the_dataclass(values, failure):
    class Args:
        pass
    args = Args()
    args.__dict__.update(values)
    failures = []

    def fail(key, message):
        failures.append((key, message))
        raise NeoXArgsError(message)
    if failure is None:
        check_owned(args, Extended, fail)
    else:
        with pytest.raises(NeoXArgsError):
            check_owned(args, Extended, fail)
    assert failures == ([failure] if failure else [])
