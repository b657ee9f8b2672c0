"""The keys of a run's config that generate.py's run reads, as one typed record the config package builds
(megatron/neox_arguments/to_generation.py): megatron/text_generation takes it, the model's InferenceRun
(megatron/checkpoint/run_keys.py) and the tokenizer, never the run config itself. No torch here."""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GenerationRun:
    """What to generate from (the prompts), how (sampling), where the samples go, and this process's share."""
    text_gen_type: str                 # unconditional | input-file | interactive
    sample_input_file: str | None      # input-file: the prompts, separated by prompt_end
    sample_output_file: str | None     # one JSON line per sample (None: printed only)
    sample_output_force: bool          # replace an existing sample_output_file
    prompt_end: str
    num_samples: int                   # unconditional: how many
    maximum_tokens: int                # generated per prompt at most
    temperature: float
    top_k: int
    top_p: float
    recompute: bool                    # a full forward per token instead of the KV cache
    generation_batch_size: int
    seed: int                          # a batch's sampling seed is seed + its first prompt's index
    rank: int                          # every rank generates every world_size-th prompt
    world_size: int
    sources: dict = field(default_factory=dict)  # {key: 'FILE:LINE' or 'command line'}: where each key was set

    def where(self, key: str) -> str:
        """Where `key` was set, for an error about its value."""
        return self.sources.get(key, "the config")
