"""The keys of a run's config that this package reads, as typed records the config package builds: what the
start-up checks read (megatron/run/preflight.py; megatron/neox_arguments/to_preflight.py), which take it and a
`ModelConfig`, and where training's monitor reports (monitor.py; megatron/neox_arguments/to_training.py); never the
run config itself. No torch here: deepy.py builds a PreflightRun before any rank starts."""
from dataclasses import dataclass

from .wandb_run import WandbRun


@dataclass(frozen=True)
class PreflightRun:
    """What the checks made before a step is spent read: the files the run opens, where it saves and loads, and the
    sizes that bound its memory; with where each key was set, which every refusal names."""
    data_path: str | None                 # one dataset (or the per-split lists below)
    train_data_paths: tuple | None
    valid_data_paths: tuple | None
    test_data_paths: tuple | None
    eval_split: str                       # test | valid: the split evaluate.py reads
    tokenizer_type: str                   # which of the tokenizer files below it opens
    vocab_file: str | None
    merge_file: str | None
    text_gen_type: str                    # generate.py reads sample-input-file when it is input-file
    sample_input_file: str | None
    save: str | None                      # checkpoints go here: a writable folder, one run at a time
    load: str | None                      # the checkpoint the run resumes from or scores
    iteration: int | None                 # the step to load (None: `latest`)
    finetune: bool                        # load needs a checkpoint even on a first launch
    train_iters: int                      # 0: train.py scores `load` as evaluate.py does
    eval_results_dir: str | None          # evaluation's result files: a writable folder
    precision: str                        # fp32 | bf16 | fp16: the device must run it
    loss_head: str                        # auto | sliced | full: how many positions' logits exist at once
    rank: int                             # rank 0 holds the save folder's lock and writes the results
    world_size: int                       # ZeRO shards the optimizer state over the ranks
    zero_stage: int                       # zero-optimization's stage (0: every rank holds all of it)
    train_micro_batch_size_per_gpu: int
    seq_length: int
    eval_micro_batch_size: int
    eval_lengths: tuple                   # the longest one bounds evaluation's memory
    random_positions: int | None          # training positions drawn from [0, N): a distance table over N
    pose_target_length: int | None        # the same for PoSE
    sources: dict                         # {key: 'file:line' or 'command line'}: where each key was set

    def source(self, key: str) -> str:
        """Where `key` was set, for an error message ('the config' when a default)."""
        return self.sources.get(key, "the config")


@dataclass(frozen=True)
class MonitorRun:
    """Where training's numbers go (monitor.py) and what its report lines count against."""
    rank: int                             # only rank 0 writes
    tensorboard_dir: str | None           # None: no TensorBoard
    wandb: WandbRun | None                # None: use-wandb is off
    train_iters: int                      # the steps the progress and the ETA count to
    train_batch_size: int                 # samples per step, all ranks: with seq_length, the tokens of a step
    seq_length: int
