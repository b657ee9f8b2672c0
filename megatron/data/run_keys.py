"""The keys of a run's config that the data package reads, as one typed record the config package builds
(megatron/neox_arguments/to_data.py): the dataset builders, the evaluation stream and the loaders take it and
the tokenizer, never the run config itself."""
from dataclasses import dataclass

from megatron.length_schedule import LengthSchedule
from megatron.probes import TrainOptions as ProbeTrainOptions


@dataclass(frozen=True)
class DataRun:
    """Where the data is, how it is cut and sampled, and this process's share of it."""
    data_path: str | None                     # one dataset, cut by `split`
    train_data_paths: tuple | None            # or a dataset list per split (blended by its weights)
    valid_data_paths: tuple | None
    test_data_paths: tuple | None
    train_data_weights: tuple | None          # one per path (None: equal weights)
    valid_data_weights: tuple | None
    test_data_weights: tuple | None
    split: str                                # data-path's train/valid/test proportions, e.g. "969,30,1"
    seq_length: int                           # of a training sample (seq_length + 1 tokens are read)
    seq_length_val: int | None                # of a validation or test sample (None: seq_length)
    seed: int                                 # shuffles the sample index; draws the probe mix
    data_cache_path: str | None               # where sample-index caches go (None: beside each dataset)
    eod_mask_loss: bool                       # no loss on predicting a document's first token
    reset_attention_mask: bool                # items carry document ids (document masking)
    reset_position_ids: bool                  # ... and positions restarting in each document
    probe: ProbeTrainOptions                  # the retrieval probe mixed into training, if any
    length_schedule: LengthSchedule | None    # its stages' train-data-weights make the staged mix
    train_iters: int                          # with the two below: the samples each split must provide
    train_batch_size: int
    eval_interval: int
    eval_iters: int
    # This process's share (loader.py): its rank among world_size, the ranks of one sequence-parallel replica.
    rank: int
    world_size: int
    sequence_parallel_size: int
    micro_batch_size: int                     # train-micro-batch-size-per-gpu
    num_workers: int                          # DataLoader worker processes
