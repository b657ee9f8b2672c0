"""The training stream of a `length-schedule` whose stages set `train-data-weights`: the blend of
train-data-paths changes at a stage's start step.

Each path is one stream, megatron-core's GPTDataset of that path (shuffled by the seed), read in order once
across the whole run: a mix only decides which path the next sample comes from, so a path drawn in two
stages continues in the second where the first stopped, and no sample is drawn twice before its path has
given every sample it was built with. Each span of steps with one mix (length_schedule.mix_spans) is
megatron-core's own BlendedDataset over the paths it weighs above 0, each read from where the earlier spans
left it, of exactly the span's samples (steps x train-batch-size). Global sample g of the run is sample
g - first of the span g falls in, so the stream is a function of the sample index alone, and a run resumed
by its consumed samples draws what the uninterrupted run would have (loader.py).

Every item carries "dataset_id": the index of its path in train-data-paths (the training loop counts the
samples of each path per step)."""
import bisect
import collections
import contextlib
import logging

import numpy as np
import torch
from megatron.core.datasets import helpers
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.utils import normalize


class PathFrom(torch.utils.data.Dataset):
    """A path's dataset read from its sample `offset` on (where the earlier spans stopped reading it). It has
    what BlendedDataset asks of its parts: the split and identifiers."""

    def __init__(self, dataset, offset: int):
        self.dataset, self.offset = dataset, offset
        self.index_split = dataset.index_split
        self.unique_identifiers = collections.OrderedDict(path=dataset.unique_identifiers, offset=offset)

    def __len__(self):
        return len(self.dataset) - self.offset

    def __getitem__(self, index):
        return self.dataset[self.offset + index]


class Span:
    """One mix over `samples` consecutive global samples from `first`: `paths` (indices into train-data-paths)
    and the dataset of the span (a BlendedDataset of their streams, or one stream)."""

    def __init__(self, first: int, samples: int, paths: list[int], dataset):
        self.first, self.samples, self.paths, self.dataset = first, samples, paths, dataset

    def item(self, index: int) -> dict:
        item = dict(self.dataset[index])
        local = int(item.pop("dataset_id", 0))  # a BlendedDataset's: the part's index in this span
        return {**item, "dataset_id": self.paths[local]}

    def drawn(self) -> np.ndarray:
        """Samples each of `paths` gives this span, from the blend's own dataset index."""
        if len(self.paths) == 1:
            return np.array([self.samples])
        return np.bincount(np.asarray(self.dataset.dataset_index[:self.samples]), minlength=len(self.paths))


class StagedMix(torch.utils.data.Dataset):
    """The run's training samples, span after span. `datasets` are the paths' whole streams."""

    def __init__(self, datasets: list, spans: list[Span]):
        self.datasets, self.spans = datasets, spans
        self.firsts = [span.first for span in spans]

    def __len__(self):
        return self.spans[-1].first + self.spans[-1].samples

    def __getitem__(self, index):
        span = self.spans[bisect.bisect_right(self.firsts, index) - 1]
        return span.item(index - span.first)


def draws_per_path(spans: list[tuple[int, tuple[float, ...]]], paths: int) -> list[int]:
    """Samples each path gives the whole run: spans are (samples, weights); counted with the blending index
    megatron-core's BlendedDataset builds (helpers.build_blending_indices, on the same normalised weights), so
    each path's dataset is built with the samples its spans will read."""
    total = np.zeros(paths, dtype=np.int64)
    for samples, weights in spans:
        chosen = [p for p, w in enumerate(weights) if w > 0]
        if len(chosen) == 1:
            total[chosen[0]] += samples
            continue
        index = np.zeros(samples, dtype=np.int16)
        helpers.build_blending_indices(index, np.zeros(samples, dtype=np.int64),
                                       normalize([float(weights[p]) for p in chosen]), len(chosen), samples, False)
        total[chosen] += np.bincount(index, minlength=len(chosen))
    return total.tolist()


def staged_mix(datasets: list, spans: list[tuple[int, tuple[float, ...]]], config) -> StagedMix:
    """The stream of `spans` ((samples, weights) in order) over the paths' `datasets`. `config`: the blends'
    megatron-core config, without a cache (each is rebuilt in every process: one pass over its samples)."""
    read = [0] * len(datasets)  # samples of each path the earlier spans took
    built, first = [], 0
    for samples, weights in spans:
        chosen = [p for p, w in enumerate(weights) if w > 0]
        parts = [PathFrom(datasets[p], read[p]) for p in chosen]
        if len(parts) == 1:  # one source: no blend (megatron-core warns about blending a single dataset)
            dataset = parts[0]
        else:
            with _uncached_quietly():
                dataset = BlendedDataset(parts, [float(weights[p]) for p in chosen], samples, config)
        span = Span(first, samples, chosen, dataset)
        for p, count in zip(chosen, span.drawn()):
            read[p] += int(count)
        built.append(span)
        first += samples
    return StagedMix(datasets, built)


class _NotSavedNote(logging.Filter):
    def filter(self, record):
        return "because path_to_cache is None" not in record.getMessage()


@contextlib.contextmanager
def _uncached_quietly():
    """Without megatron-core's warning that the blend's index is not saved: it is left uncached on purpose."""
    logger, note = logging.getLogger(BlendedDataset.__module__), _NotSavedNote()
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)
