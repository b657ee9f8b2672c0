"""The one place a run's config becomes what checkpointing reads (megatron/checkpoint/run_keys.py): the keys of
saving and resuming (`CheckpointRun`), and those of loading a trained model (`InferenceRun`), beside the
`ModelConfig` (to_model.py). megatron/checkpoint/ never reads the run config itself."""
from megatron.checkpoint.run_keys import CheckpointRun, InferenceRun
from .to_length_schedule import length_schedule_of


def checkpoint_run(neox_args) -> CheckpointRun:
    """What training's saves and resume take from `neox_args`, as the run trains with it: built once when
    training starts (after the ranks are known, which the stored config records)."""
    return CheckpointRun(
        save=neox_args.save, load=neox_args.load, iteration=neox_args.iteration, finetune=neox_args.finetune,
        no_load_optim=neox_args.no_load_optim, no_load_rng=neox_args.no_load_rng,
        keep_last_n_checkpoints=neox_args.keep_last_n_checkpoints, config_files=dict(neox_args.config_files),
        resolved_yaml=neox_args.resolved_yaml(),
        stored_config={k: v for k, v in neox_args.to_dict().items() if k != "config_files"},
        length_schedule=length_schedule_of(neox_args), config_read_from=config_read_from(neox_args))


def inference_run(neox_args) -> InferenceRun:
    """What loading a trained model takes from `neox_args`: its model and the run keys of loading."""
    return InferenceRun(model=neox_args.model, load=neox_args.load, iteration=neox_args.iteration,
                        vocab_divisible_by=neox_args.make_vocab_size_divisible_by, precision=neox_args.precision,
                        local_rank=neox_args.local_rank, config_read_from=config_read_from(neox_args))


def config_read_from(neox_args) -> tuple:
    """The files the config's keys were read from, once each: sources read 'FILE:LINE', or 'checkpoint FILE:LINE'
    for a key from_checkpoint.py took from a checkpoint (other sources, 'command line', name no file)."""
    return tuple(dict.fromkeys(str(source).removeprefix("checkpoint ").rsplit(":", 1)[0]
                               for source in neox_args.config_sources.values()))
