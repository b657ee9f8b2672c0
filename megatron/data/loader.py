"""A resumable DataLoader over one data-parallel rank's share of a dataset.

The global sample stream is dataset[0], dataset[1], ... (the dataset is already shuffled by
megatron-core), continuing at dataset[g % len(dataset)] if a run asks for more samples than were
built. Each micro-step takes `micro_batch * data_parallel_size` consecutive samples and rank r gets
the r-th slice, so a run resumed with `consumed_samples` (global samples used so far, i.e.
iteration x train_batch_size) sees exactly the samples an uninterrupted run would. Under sequence
parallelism the rank is its data-parallel replica's (megatron/parallel), and each rank of a replica keeps
its shard of every sequence. The sampler is
endless, so the loader is iterated once per run: no re-created iterators, no `itertools.cycle`
caching every batch.
"""
import functools

import torch
from torch.utils.data import DataLoader, Sampler, default_collate

from megatron.parallel import sequence_shard, shard_of

from .run_keys import DataRun


class PretrainingBatchSampler(Sampler):
    def __init__(self, dataset_size: int, consumed_samples: int, micro_batch_size: int,
                 data_parallel_rank: int, data_parallel_size: int):
        if dataset_size <= 0:
            raise ValueError("cannot sample from an empty dataset")
        if not 0 <= data_parallel_rank < data_parallel_size:
            raise ValueError(f"data-parallel rank {data_parallel_rank} is outside 0..{data_parallel_size - 1}")
        self.dataset_size = dataset_size
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.rank, self.world = data_parallel_rank, data_parallel_size

    def __iter__(self):
        step = self.micro_batch_size * self.world
        start = self.consumed_samples + self.rank * self.micro_batch_size
        while True:
            yield [(start + i) % self.dataset_size for i in range(self.micro_batch_size)]
            start += step


def build_data_loader(dataset, data: DataRun, consumed_samples: int = 0, micro_batch_size: int = None):
    """Batches (dicts of [micro_batch, s] tensors) of this rank's share (`data`'s rank, world size and
    sequence-parallel size), starting after `consumed_samples` global samples. None for a split without data."""
    if dataset is None:
        return None
    # Sequence parallelism: the ranks of one replica read the same samples, each its shard of every sequence.
    size = data.sequence_parallel_size
    replica, shard = shard_of(data.rank, size)
    sampler = PretrainingBatchSampler(len(dataset), consumed_samples, micro_batch_size or data.micro_batch_size,
                                      replica, data.world_size // size)
    collate = None if size == 1 else functools.partial(_collated_shard, shard=shard, size=size)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=data.num_workers,
                      pin_memory=torch.cuda.is_available(), collate_fn=collate)


def _collated_shard(samples, shard: int, size: int) -> dict:
    return sequence_shard(default_collate(samples), shard, size)
