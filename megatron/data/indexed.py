"""Open a NeoX `.bin/.idx` pair with megatron-core's `IndexedDataset`, with clear errors when the
files are missing, truncated or disagree (megatron-core itself fails with bare asserts or reads
past the end of the data)."""
import os

import numpy as np
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset

from .errors import DataError

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
    try:
        dataset = IndexedDataset(prefix, mmap=True)
    except (AssertionError, ValueError, KeyError, IndexError) as err:
        raise DataError(f"dataset {prefix}: {idx_path} is not a valid megatron/NeoX index "
                        f"(truncated or corrupt: {err or type(err).__name__}). {REBUILD_HINT}") from err
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


def _check_token_ids(dataset, prefix, vocab_size, max_documents: int = 64):
    """A cheap look at the first documents: ids beyond the vocabulary mean another tokenizer wrote it."""
    count = min(len(dataset), max_documents)
    largest = max((int(np.max(doc)) for doc in dataset[0:count] if len(doc)), default=-1)
    if largest >= vocab_size:
        raise DataError(f"dataset {prefix} holds token id {largest}, but the tokenizer's vocabulary has "
                        f"{vocab_size} ids: it was tokenized with a different tokenizer. Set tokenizer-type/"
                        "vocab-file to the ones used for preprocessing, or preprocess again.")
