"""Options an owner declares (an evaluation mode, the probe training mix) become config keys and are
checked by their declarations (megatron/neox_arguments/owned_options.py)."""
from dataclasses import dataclass

import pytest

from megatron.model.positional_embeddings import OptionError, option
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
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


@pytest.mark.parametrize("values, message", [
    ({"probe-kv-pairs": 0}, r"probe-kv-pairs: must be an integer from 1 to 9000 \(the key-value pairs"),
    ({"probe-depths": [0.5, 2]}, r"probe-depths: must be a non-empty list of numbers in \[0, 1\]"),
    ({"probe-train-fraction": 0.5}, r"probe-train-fraction: is 0.5, but probe-train-task is not set"),
    ({"probe-train-task": "passkey", "probe-train-fraction": 0.5, "probe-train-kv-pairs": 2},
     r"probe-train-kv-pairs: is 2, but probe-train-task is 'passkey', not 'kv-retrieval'"),
])
def test_the_probes_options_are_checked_by_their_declarations(values, message):
    with pytest.raises(NeoXArgsError, match=r"^the given config: " + message):
        NeoXArgs.from_dict({"train_micro_batch_size_per_gpu": 1, **values})
