"""Train/valid/test datasets on megatron-core's `GPTDataset` and `BlendedMegatronDatasetBuilder`.

Samples are `seq_length + 1` tokens packed across documents, with a per-epoch sample index shuffled
by the seed and cached next to the data (or in `data-cache-path`). The validation and test sets
use `seq-length-val`: megatron-core has one sequence length per config, so each split is built by
its own builder call that masks out the other splits. No per-sample attention masks are made
(they are L x L; the model is causal by construction).
"""
import contextlib
import os

import numpy as np
import torch
from filelock import FileLock
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.blended_megatron_dataset_config import (
    convert_split_vector_to_split_matrix, parse_and_normalize_split)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

from megatron.quoting import quote

from .errors import DataError
from .indexed import open_indexed_dataset
from .packed_documents import WithDocuments
from .probe_mix import ProbeMix, check_fits, probe_options
from .run_keys import DataRun
from .staged_mix import StagedMix, draws_per_path, staged_mix

SPLITS = ("train", "valid", "test")


def build_train_valid_test_datasets(data: DataRun, tokenizer):
    """(train, valid, test) GPTDatasets (or BlendedDatasets of them); a split without data is None.
    Items are dicts of "tokens", "labels" (LongTensor[s]), "loss_mask" (FloatTensor[s]) and
    "position_ids"; train has seq_length tokens, valid/test seq_length_val. With a length-schedule whose
    stages set train-data-weights, train is the StagedMix of staged_mix.py. With probe-train-task set,
    train mixes in that probe's samples (probe_mix.py); with reset-attention-mask, items also carry
    "document_ids" and, with reset-position-ids, positions restarting in each document (packed_documents.py).
    `data`: the run's data keys (run_keys.py); `tokenizer`: the run's, whose EOD ends a document."""
    if data.data_path and any(getattr(data, f"{s}_data_paths") for s in SPLITS):
        raise DataError("both data-path and train-/valid-/test-data-paths are set; use one: data-path "
                        "(one dataset cut by split) or the per-split paths.")
    task, options = data.probe.probe_train_task, probe_options(data.probe)
    if task:
        check_fits(task, options, data.seq_length, tokenizer)  # before any sample index is built
    sizes = samples_per_split(data)
    schedule = data.length_schedule
    mixes = schedule is not None and schedule.mixes  # stages with their own train-data-weights (staged_mix.py)
    lengths = (data.seq_length,) + (data.seq_length_val or data.seq_length,) * 2
    train, valid, test = (_build_split(index, data, tokenizer, lengths[index], sizes) if index or not
                          mixes else _build_staged_mix(data, tokenizer, schedule) for index in range(3))
    if task and train is not None:  # training only: validation and test perplexity stay on plain text
        train = ProbeMix(train, task, options, data.probe.probe_train_fraction, data.seed, data.seq_length, tokenizer)
    if data.reset_attention_mask:  # every split: validation loss is measured as training sees text
        reset = data.reset_position_ids
        train, valid, test = (None if split is None else WithDocuments(split, tokenizer.eod, reset)
                              for split in (train, valid, test))
    return train, valid, test


def samples_per_split(data: DataRun) -> list:
    """Samples each split must provide (as NeoX): every training step, and every evaluation run."""
    batch = data.train_batch_size
    evaluations = data.train_iters // data.eval_interval + 1
    return [data.train_iters * batch, evaluations * data.eval_iters * batch, data.eval_iters * batch]


def build_evaluation_stream(data: DataRun, split: str, tokenizer) -> np.ndarray:
    """The token ids (int64, 1-D) of `split`'s documents in stored order, each ending with EOD: the
    same documents the training datasets use for that split, unshuffled and unpacked."""
    if split not in SPLITS:
        raise DataError(f"unknown split '{split}'; choose one of {', '.join(SPLITS)}.")
    index = SPLITS.index(split)
    if data.data_path:
        dataset = _open(data.data_path, tokenizer)
        documents = _document_range(data, len(dataset), index)
        if documents is None:
            raise DataError(f"split '{data.split}' gives the {split} split no weight, so there is no "
                            f"{split} data to evaluate on; give it a weight or evaluate another split.")
        parts = [(dataset, *documents)]
    else:
        blend = _blend_of_split(data, index)
        if blend is None:
            raise DataError(f"no {split} data: set data-path (cut by split) or {split}-data-paths.")
        parts = [(dataset, 0, len(dataset)) for dataset in (_open(p, tokenizer) for p in blend[0])]
    return np.concatenate([_documents_with_eod(*part, tokenizer.eod) for part in parts])


def _build_split(index, data, tokenizer, seq_length, sizes):
    if data.data_path:
        dataset = _open(data.data_path, tokenizer)
        documents = _document_range(data, len(dataset), index)
        if documents is None:
            return None
        _check_one_sample(index, [(data.data_path, dataset, *documents)], seq_length)
        config = _config(data, tokenizer, seq_length, blend=([data.data_path], None), split=data.split)
        # Build only this split (the others may have another sequence length).
        config.split_matrix = [m if i == index else None for i, m in enumerate(config.split_matrix)]
        prefixes = [data.data_path]
    else:
        blend = _blend_of_split(data, index)
        if blend is None:
            return None
        prefixes = blend[0]
        opened = [(prefix, _open(prefix, tokenizer)) for prefix in prefixes]
        _check_one_sample(index, [(prefix, dataset, 0, len(dataset)) for prefix, dataset in opened], seq_length)
        config = _config(data, tokenizer, seq_length,
                         blend_per_split=[blend if i == index else None for i in range(3)])
    if len(prefixes) > 1 and not torch.distributed.is_initialized():
        # megatron-core 0.16's BlendedDataset calls torch.distributed.get_rank() when its cache
        # misses; in a single process the (cheap) blend index is therefore rebuilt, not cached.
        config.path_to_cache = None
    return _built(data, config, sizes, prefixes, index)


def _build_staged_mix(data, tokenizer, schedule) -> StagedMix:
    """The training stream of a schedule whose stages set train-data-weights: each path's GPTDataset, built
    with the samples its spans draw, blended span by span (staged_mix.py)."""
    prefixes, _ = _blend_of_split(data, 0)
    batch = data.train_batch_size
    spans = [((end - begin) * batch, weights) for begin, end, weights in schedule.mix_spans(data.train_iters)]
    draws = draws_per_path(spans, len(prefixes))
    datasets = []
    for prefix, samples in zip(prefixes, draws):
        _check_one_sample(0, [(prefix, dataset := _open(prefix, tokenizer), 0, len(dataset))], data.seq_length)
        config = _config(data, tokenizer, data.seq_length, blend_per_split=[([prefix], None), None, None])
        # At least one sample: a path the mixes never draw is still opened and checked like the others.
        datasets.append(_built(data, config, [max(samples, 1), 0, 0], [prefix], 0))
    blends = _config(data, tokenizer, data.seq_length, blend_per_split=[(prefixes, None), None, None])
    blends.path_to_cache = None  # a span's blend index is one pass over its samples: rebuilt, never cached
    return staged_mix(datasets, spans, blends)


def _built(data, config, sizes, prefixes, index):
    """Split `index` of megatron-core's builder, under the cache folders' locks."""
    builder = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config)
    try:
        with cache_locks(cache_folders(data, prefixes)):
            return builder.build()[index]
    except ValueError as err:  # numpy, loading a cache file with allow_pickle off: never unpickled
        if "memory-mapped" not in str(err) and "pickle" not in str(err):
            raise
        caches = " or ".join(cache_folders(data, prefixes))
        raise DataError(f"a sample-index cache file in {caches} is not a plain numpy array ({quote(str(err))}): it "
                        "was damaged or replaced, and a cache is never unpickled. Remove that cache folder; it is "
                        "rebuilt from the data.") from None


def cache_folders(data, prefixes) -> list[str]:
    """Where megatron-core keeps the sample-index files this build reads or writes: data-cache-path, else
    each prefix's own `cache/GPTDataset_indices` (megatron-core's default, GPTDataset)."""
    if data.data_cache_path:
        return [data.data_cache_path]
    return sorted({os.path.join(prefix, "cache", "GPTDataset_indices") for prefix in prefixes})


@contextlib.contextmanager
def cache_locks(folders):
    """Hold `<folder>.lock` for each cache folder (sorted: two builds never wait on each other crosswise).

    megatron-core writes its index files in place (numpy.save) and takes any complete set of names as a
    cache hit, so two jobs started side by side on one dataset (comparing variants) used to read the other's
    half-written shuffle index ("No data left in file"). With the lock the first job builds and the others
    wait, then load. Only rank 0 of a distributed job locks: megatron-core builds there first and the other
    ranks load after its barrier, inside build(), which a rank waiting for the lock would never reach. A
    folder whose parent cannot be written gets no lock: no job can write a cache there either."""
    rank_zero = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    with contextlib.ExitStack() as held:
        for folder in folders if rank_zero else ():
            try:
                os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
                held.enter_context(FileLock(f"{os.path.abspath(folder)}.lock"))
            except OSError:  # read-only data: nothing is written there, so nothing to wait for
                continue
        yield


def _check_one_sample(index, parts, seq_length) -> None:
    """A split must hold at least one sample (seq_length + 1 tokens): megatron-core would otherwise
    build every sample from the same few tokens repeated across epochs, and train without a word."""
    tokens = sum(int(dataset.sequence_lengths[begin:end].sum()) for _, dataset, begin, end in parts)
    if tokens < seq_length + 1:
        names = ", ".join(prefix for prefix, *_ in parts)
        raise DataError(f"the {SPLITS[index]} split of {names} holds {tokens:,} tokens, fewer than one sample of "
                        f"{seq_length + 1:,} (the sequence length {seq_length:,} + 1): every sample would repeat "
                        "the same tokens. Use more data, give that split more weight in `split`, or lower the "
                        "sequence length.")


def _config(data, tokenizer, seq_length, **blend) -> GPTDatasetConfig:
    return GPTDatasetConfig(
        random_seed=data.seed, sequence_length=seq_length, tokenizer=tokenizer,
        path_to_cache=data.data_cache_path, reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=data.eod_mask_loss, create_attention_mask=False, **blend)


def _open(prefix, tokenizer):
    return open_indexed_dataset(prefix, vocab_size=max(tokenizer.vocab_size, tokenizer.eod + 1))


def _document_range(data, num_documents, index):
    """Documents [begin, end) of split `index` of data-path (megatron-core's own rounding), or None
    when `split` gives it no weight. A weighted split with no documents is an error."""
    try:
        matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(data.split))
    except (AssertionError, ValueError, ZeroDivisionError) as err:
        raise DataError(f"split '{data.split}' is not three non-negative weights like '969,30,1'.") from err
    if matrix[index] is None:
        return None
    begin, end = (int(round(bound * num_documents)) for bound in matrix[index])
    if end <= begin:
        raise DataError(f"split '{data.split}' gives the {SPLITS[index]} split no documents of "
                        f"{data.data_path} ({num_documents} documents in all). Use more data, or give "
                        f"that split more weight (or 0 to have no {SPLITS[index]} set).")
    return begin, end


def _blend_of_split(data, index):
    """(prefixes, weights) of train-/valid-/test-data-paths, or None when the split has none."""
    name = SPLITS[index]
    prefixes = getattr(data, f"{name}_data_paths")
    if not prefixes:
        if index == 0:
            raise DataError("no training data: set data-path (one dataset, cut by split) or "
                            "train-data-paths / valid-data-paths / test-data-paths.")
        return None
    weights = getattr(data, f"{name}_data_weights")
    weights = [1.0] * len(prefixes) if weights is None else list(weights)  # NeoX: equal weighting when none is given
    if len(weights) != len(prefixes) or any(w <= 0 for w in weights):
        raise DataError(f"{name}-data-weights {weights} must hold one positive weight per path of "
                        f"{name}-data-paths ({len(prefixes)} paths).")
    return list(prefixes), [float(w) for w in weights]


def _documents_with_eod(dataset, begin, end, eod) -> np.ndarray:
    lengths = dataset.sequence_lengths[begin:end].astype(np.int64)
    tokens = dataset.bin_reader.read(dtype=dataset.index.dtype, count=int(lengths.sum()),
                                     offset=int(dataset.index.sequence_pointers[begin])).astype(np.int64)
    ends = np.cumsum(lengths)
    missing = tokens[ends - 1] != eod  # data preprocessed without --append-eod
    return np.insert(tokens, ends[missing], eod)
