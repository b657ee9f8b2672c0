"""The one place a run's config becomes what the data package reads (megatron/data/run_keys.py's `DataRun`):
megatron/data/ never reads the run config itself."""
from megatron.data.run_keys import DataRun
from .to_length_schedule import length_schedule_of
from megatron.probes import TrainOptions as ProbeTrainOptions
from .values import as_tuple


def data_run(neox_args) -> DataRun:
    """The data keys of `neox_args` as they are now: build it after the ranks are known (join_process_group)
    where the loaders' share matters."""
    return DataRun(
        data_path=neox_args.data_path, train_data_paths=as_tuple(neox_args.train_data_paths),
        valid_data_paths=as_tuple(neox_args.valid_data_paths), test_data_paths=as_tuple(neox_args.test_data_paths),
        train_data_weights=as_tuple(neox_args.train_data_weights),
        valid_data_weights=as_tuple(neox_args.valid_data_weights), test_data_weights=as_tuple(neox_args.test_data_weights),
        split=neox_args.split, seq_length=neox_args.seq_length, seq_length_val=neox_args.seq_length_val,
        seed=neox_args.seed, data_cache_path=neox_args.data_cache_path, eod_mask_loss=neox_args.eod_mask_loss,
        reset_attention_mask=neox_args.reset_attention_mask, reset_position_ids=neox_args.reset_position_ids,
        probe=ProbeTrainOptions(probe_train_task=neox_args.probe_train_task,
                                probe_train_fraction=neox_args.probe_train_fraction,
                                probe_train_kv_pairs=neox_args.probe_train_kv_pairs),
        length_schedule=length_schedule_of(neox_args), train_iters=neox_args.train_iters,
        train_batch_size=neox_args.train_batch_size, eval_interval=neox_args.eval_interval,
        eval_iters=neox_args.eval_iters, rank=neox_args.rank, world_size=neox_args.world_size,
        sequence_parallel_size=neox_args.sequence_parallel_size,
        micro_batch_size=neox_args.train_micro_batch_size_per_gpu, num_workers=neox_args.num_workers)
