"""One channel vocabulary: a method names its channels once (base.py's CHANNELS), the strategies speak the
same names (needs.py's phrases), and the protocol table in docs/architecture.md is the one the code gives."""
import importlib.util
import pathlib

import pytest

from megatron.model.attention.needs import EVERY_STRATEGY, NEEDS
from megatron.model.positional_embeddings import ModelShape, available, lookup
from megatron.model.positional_embeddings import base
from megatron.model.positional_embeddings.base import CHANNELS, PositionalEmbedding

REPO = pathlib.Path(__file__).resolve().parents[3]
SHAPE = ModelShape(num_heads=4, head_dim=8, hidden_size=32, max_positions=64)


def test_every_channel_is_a_need_the_strategies_can_refuse_with_its_phrase():
    assert set(CHANNELS) - EVERY_STRATEGY <= set(NEEDS)
    for name in available():
        assert lookup(name)(SHAPE).channels <= set(CHANNELS), name


def test_a_method_on_the_former_flags_is_refused_with_how_to_port_it():
    with pytest.raises(TypeError, match=r"sets uses_token_terms: name the channel in `channels` instead "
                                        r"\(uses_token_terms -> token_terms\)"):
        type("Gated", (PositionalEmbedding,), {"uses_token_terms": True})
    with pytest.raises(TypeError, match="names 'gate', which is not a channel; the channels are query_terms"):
        type("Gated", (PositionalEmbedding,), {"channels": frozenset({"gate"})})


def test_the_protocol_table_in_the_docs_is_current():
    spec = importlib.util.spec_from_file_location("channel_table", REPO / "tools/docs/channel_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    page = (REPO / tool.PAGE).read_text()
    assert tool.table() in page, "regenerate it: python tools/docs/channel_table.py --write"
    assert "| `normaliser` | `normalise` |" in page and "`stickbreaking`" in page


def test_the_protocol_docstring_lists_no_channels_by_their_history():
    ordinals = ("third", "fourth", "fifth", "sixth", "seventh", "eighth", "three channels", "four channels")
    assert not [word for word in ordinals if word in base.__doc__.lower()]


def test_a_wrapper_over_a_method_with_layer_values_is_refused_with_the_channels_words():
    """A wrapper (dape, attention-temperature) is a module of its own: a layer channel of the method under it
    (fox's gate, path's transforms, wall's decays) would silently be lost, so it is refused, in the words of
    CHANNELS."""
    from megatron.model.positional_embeddings.dape import daped
    from megatron.model.positional_embeddings.temperature import tempered
    layered = {name: pe for name in available() if (pe := lookup(name)(SHAPE)).channels & set(base.LAYER_CHANNELS)}
    assert {"fox", "path", "wall"} <= set(layered)
    for name, pe in layered.items():
        channel = sorted(pe.channels & set(base.LAYER_CHANNELS))[0]
        with pytest.raises(base.PositionalEmbeddingError, match=rf"dape is set, but pos-emb '{name}' has .*"
                                                                 rf"{CHANNELS[channel].description[:30]}"):
            daped(pe, {"version": 1})
        with pytest.raises(base.PositionalEmbeddingError, match=f"attention-temperature is set, but pos-emb '{name}'"):
            tempered(pe, {"type": "ssmax"})
    assert base.LAYER_CHANNELS == tuple(name for name, channel in CHANNELS.items() if channel.layer)
