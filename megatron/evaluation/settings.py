"""`EvaluationSettings`: what a run's evaluation keys ask (`eval-*`, the modes' own keys such as probe-depths, the
checkpoint to load and the ranks), read once from the run's config by the config package
(megatron/neox_arguments/to_evaluation.py); the driver, its modes and their records read these, not the config."""
import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EvaluationSettings:
    load: str | None                   # the checkpoint folder (`load`)
    iteration: int | None              # its step (`iteration`), None: the latest
    lengths: tuple[int, ...]           # eval-lengths (the run's seq-length when unset)
    modes: tuple[str, ...]             # eval-modes
    split: str = "valid"               # eval-split
    seed: int = 0                      # eval-seed
    chunks: int | None = None          # eval-chunks (None: every chunk)
    stride: int | None = None          # eval-stride (sliding)
    documents: str = "cross"           # eval-documents
    force: bool = False                # eval-force
    results_dir: str = "eval_results"  # eval-results-dir
    micro_batch_size: int = 1          # eval-micro-batch-size
    rank: int = 0
    world_size: int = 1
    sequence_parallel_size: int = 1
    mode_keys: dict = field(default_factory=dict)  # {config key: value} of every mode's own keys (probe-depths, ...)

    def options(self, options_class):
        """A mode's options dataclass (its `Options`, or a base of it) filled with these settings' values."""
        return options_class(**{f.name: self.mode_keys[f.name] for f in dataclasses.fields(options_class)})
