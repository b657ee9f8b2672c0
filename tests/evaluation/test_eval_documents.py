"""`eval-documents: within`: only chunks that lie inside one document are scored, against a stream built
here with known document boundaries; the default (`cross`) is the paper's chunking, unchanged; the
choice is recorded in the result file and refused with `sliding`."""
import numpy as np
import pytest

from megatron.errors import NeoXArgsError
from megatron.evaluation.chunks import chunk_starts
from megatron.neox_arguments import NeoXArgs


EOD = 9


L = 8


def stream_of(document_lengths):
    """Documents of the given lengths (tokens 1..), each followed by EOD, concatenated."""
    parts = [np.concatenate([np.arange(1, n + 1) % 8 + 1, [EOD]]) for n in document_lengths]
    return np.concatenate(parts).astype(np.int64)


def test_within_keeps_exactly_the_chunks_whose_inputs_hold_no_end_of_document():
    stream = stream_of([30, 3, 20, 5, 40])
    starts = chunk_starts(len(stream), L, None, 0, stream == EOD)
    expected = [c for c in range(0, (len(stream) - 1) // L * L, L) if EOD not in stream[c:c + L]]
    assert starts.tolist() == expected and len(expected) > 3
    for c in starts:  # each chunk's inputs are inside one document
        assert EOD not in stream[c:c + L]


def test_cross_is_the_papers_tiling_unchanged():
    stream = stream_of([30, 3, 20, 5, 40])
    assert chunk_starts(len(stream), L, None, 0).tolist() == list(range(0, (len(stream) - 1) // L * L, L))
    assert chunk_starts(len(stream), L, None, 0, None).tolist() == chunk_starts(len(stream), L, None, 0).tolist()


def test_a_seeded_subset_is_drawn_from_the_candidates_only():
    stream = stream_of([50, 2, 2, 60, 1, 70])
    picked = chunk_starts(len(stream), L, 5, 3, stream == EOD)
    assert len(picked) == 5 and all(EOD not in stream[c:c + L] for c in picked)


def test_no_chunk_inside_a_document_is_one_clear_error():
    stream = stream_of([3, 4, 5, 2, 6])
    with pytest.raises(ValueError, match=r"no chunk of 8 tokens lies inside one document"):
        chunk_starts(len(stream), L, None, 0, stream == EOD)


def test_within_is_refused_with_sliding():
    config = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 16,
              "train_micro_batch_size_per_gpu": 1, "tokenizer_type": "ByteLevelTokenizer", "pos_emb": "alibi"}
    assert NeoXArgs.from_dict(config).eval_documents == "cross"
    with pytest.raises(NeoXArgsError, match=r"eval-documents: is 'within', but the `sliding` mode"):
        NeoXArgs.from_dict(config | {"eval_documents": "within", "eval_modes": ["sliding"]})
