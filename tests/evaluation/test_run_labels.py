"""Every training switch of labels.SWITCHES is seen three times over: by the short label that names a run's result
files, by the readable one that tables print, and by the config hash that recognises a finished run. A switch
the hash missed would let a sweep take a run trained without it for one trained with it."""
import pytest

from megatron.evaluation.identity import config_hash
from megatron.evaluation.labels import SWITCHES, switch_labels, trained_parts
from megatron.neox_arguments import NeoXArgs

BASE = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 64, "pos_emb": "rotary",
        "rotary_pct": 0.5, "train_micro_batch_size_per_gpu": 1, "tokenizer_type": "ByteLevelTokenizer"}
ON = {  # a value that turns each switch on, as a user writes it
    "layer_pattern": [{}, {"pos-emb": "alibi", "attention-window": 16}],
    "attention_temperature": {"type": "ssmax"},
    "dape": {"version": 2},
    "attention_output_gate": "head",
    "attention_sink": True,
    "rotary_unrotated_fraction": 0.25,
    "random_positions": 256,
    "pose_target_length": 256,
    "length_schedule": [{"start-step": 0, "window": 8}],
    "pos_emb": "path",  # with its labelled option on (path-forget-gate, below)
    "reset_attention_mask": True,
}
ALSO = {"pos_emb": {"path_forget_gate": True}}


def test_the_table_names_every_switch_once():
    assert sorted(s.key for s in SWITCHES) == sorted(ON) and len({s.key for s in SWITCHES}) == len(SWITCHES)


@pytest.mark.parametrize("key", sorted(ON))
def test_a_switch_changes_both_labels_and_the_config_hash(key):
    plain = NeoXArgs.from_dict(BASE | ({"pos_emb": ON[key]} if key == "pos_emb" else {}))  # path: its option off
    switched = NeoXArgs.from_dict(BASE | {key: ON[key]} | ALSO.get(key, {}))
    assert key in NeoXArgs.trained_keys()
    assert config_hash(switched.to_dict(), NeoXArgs.trained_keys()) != config_hash(plain.to_dict(),
                                                                                   NeoXArgs.trained_keys())
    assert switch_labels(plain) == trained_parts(plain) == []
    assert len(switch_labels(switched)) == len(trained_parts(switched)) == 1
    # the checkpoint's stored copy of the config (a plain dict) is labelled as the config it came from
    stored = switched.to_dict()
    assert (switch_labels(stored), trained_parts(stored)) == (switch_labels(switched), trained_parts(switched))
