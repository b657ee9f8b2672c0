"""The one place a run's config becomes what the start-up checks read (megatron/run/run_keys.py's `PreflightRun`):
megatron/run/preflight.py never reads the run config itself."""
from megatron.run.run_keys import PreflightRun
from .values import as_tuple


def preflight_run(neox_args) -> PreflightRun:
    """The keys the checks read, as the config is now (rank and world size: this process's, once it is started)."""
    return PreflightRun(
        data_path=neox_args.data_path, train_data_paths=as_tuple(neox_args.train_data_paths),
        valid_data_paths=as_tuple(neox_args.valid_data_paths), test_data_paths=as_tuple(neox_args.test_data_paths),
        eval_split=neox_args.eval_split, tokenizer_type=neox_args.tokenizer_type, vocab_file=neox_args.vocab_file,
        merge_file=neox_args.merge_file, text_gen_type=neox_args.text_gen_type,
        sample_input_file=neox_args.sample_input_file, save=neox_args.save, load=neox_args.load,
        iteration=neox_args.iteration, finetune=neox_args.finetune, train_iters=neox_args.train_iters,
        eval_results_dir=neox_args.eval_results_dir, precision=neox_args.precision, loss_head=neox_args.loss_head,
        rank=neox_args.rank, world_size=neox_args.world_size,
        zero_stage=neox_args.zero_optimization.get("stage", 0),
        train_micro_batch_size_per_gpu=neox_args.train_micro_batch_size_per_gpu, seq_length=neox_args.seq_length,
        eval_micro_batch_size=neox_args.eval_micro_batch_size, eval_lengths=as_tuple(neox_args.eval_lengths),
        random_positions=neox_args.random_positions, pose_target_length=neox_args.pose_target_length,
        sources=dict(neox_args.config_sources))
