"""Open a NeoX `.bin/.idx` pair with megatron-core's `IndexedDataset`, with clear errors when the
files are missing, truncated or disagree (megatron-core itself fails with bare asserts or reads
past the end of the data)."""
import os
import struct

import numpy as np
from megatron.core.datasets.indexed_dataset import _INDEX_HEADER, DType, IndexedDataset

from .errors import DataError

# The fixed start of an .idx: magic, version, dtype code, sequence count, document-index count.
# Read here only to report a truncated index precisely; megatron-core does the actual reading.
INDEX_START = struct.Struct("<9sQBQQ")

REBUILD_HINT = ("Re-run tools/datasets/preprocess_data.py (or tools/datasets/build_default_corpus.py) "
                "to write the pair again.")


def open_indexed_dataset(prefix: str, vocab_size: int = None) -> IndexedDataset:
    """The dataset at `prefix` (.bin + .idx), checked: both files exist, the index parses, the data
    file holds exactly the tokens the index describes, and (given `vocab_size`) the first tokens are
    valid ids of that vocabulary."""
    bin_path, idx_path = prefix + ".bin", prefix + ".idx"
    missing = [p for p in (bin_path, idx_path) if not os.path.isfile(p)]
    if missing:
        raise DataError(f"dataset {prefix}: {' and '.join(missing)} not found. data-path names the prefix "
                        f"of a .bin/.idx pair (without the extension). {REBUILD_HINT}")
    problem = _index_problem(idx_path)
    if problem is None and os.path.getsize(bin_path) == 0:  # megatron-core cannot even open it (mmap)
        raise DataError(f"dataset {prefix}: {bin_path} is empty (0 bytes), but {idx_path} describes "
                        f"{_index_sequences(idx_path):,} documents: the data file was truncated or never "
                        f"written. {REBUILD_HINT}")
    if problem is None:
        try:
            dataset = IndexedDataset(prefix, mmap=True)
        except (AssertionError, ValueError, KeyError, IndexError, struct.error) as err:
            problem = str(err) or type(err).__name__
    if problem is not None:
        raise DataError(f"dataset {prefix}: {idx_path} is not a valid megatron/NeoX index ({problem}). "
                        f"{REBUILD_HINT}")
    lengths, pointers = dataset.index.sequence_lengths, dataset.index.sequence_pointers
    if len(lengths) == 0:
        raise DataError(f"dataset {prefix} holds no documents. {REBUILD_HINT}")
    itemsize = DType.size(dataset.index.dtype)
    expected = int(pointers[-1]) + int(lengths[-1]) * itemsize
    actual = os.path.getsize(bin_path)
    if expected != actual:
        raise DataError(f"dataset {prefix}: {bin_path} has {actual:,} bytes but {idx_path} describes "
                        f"{expected:,} bytes ({len(lengths):,} documents of {dataset.index.dtype.__name__}): "
                        f"the two files disagree (a truncated or mismatched pair). {REBUILD_HINT}")
    if vocab_size is not None:
        _check_token_ids(dataset, prefix, vocab_size)
    return dataset


def _index_sequences(idx_path) -> int:
    with open(idx_path, "rb") as fh:
        return INDEX_START.unpack(fh.read(INDEX_START.size))[3]


def _index_problem(idx_path):
    size = os.path.getsize(idx_path)
    if size < INDEX_START.size:
        return f"it has {size} bytes, fewer than the {INDEX_START.size}-byte header: truncated"
    with open(idx_path, "rb") as fh:
        magic, _, _, sequences, document_entries = INDEX_START.unpack(fh.read(INDEX_START.size))
    if magic != _INDEX_HEADER:
        return "it does not start with the MMIDIDX magic bytes"
    needed = INDEX_START.size + sequences * (4 + 8) + document_entries * 8  # lengths, pointers, doc index
    if size < needed:
        return f"it has {size:,} bytes but its header describes {sequences:,} sequences needing {needed:,}: truncated"
    return None


def _check_token_ids(dataset, prefix, vocab_size, max_documents: int = 64):
    """A cheap look at the first documents: ids beyond the vocabulary mean another tokenizer wrote it."""
    count = min(len(dataset), max_documents)
    largest = max((int(np.max(doc)) for doc in dataset[0:count] if len(doc)), default=-1)
    if largest >= vocab_size:
        raise DataError(f"dataset {prefix} holds token id {largest}, but the tokenizer's vocabulary has "
                        f"{vocab_size} ids: it was tokenized with a different tokenizer. Set tokenizer-type/"
                        "vocab-file to the ones used for preprocessing, or preprocess again.")
