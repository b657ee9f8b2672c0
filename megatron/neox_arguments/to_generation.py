"""The one place a run's config becomes what text generation reads (megatron/text_generation/run_keys.py's
`GenerationRun`), beside the model's `InferenceRun` (to_checkpoint.py): megatron/text_generation never reads the
run config itself."""
import dataclasses

from megatron.text_generation.run_keys import GenerationRun


def generation_run(neox_args) -> GenerationRun:
    """The generation keys of `neox_args`, with where each was set: every field but `sources` is the config
    key of its name."""
    keys = [f.name for f in dataclasses.fields(GenerationRun) if f.name != "sources"]
    sources = neox_args.config_sources
    return GenerationRun(**{key: getattr(neox_args, key) for key in keys},
                         sources={key: sources[key] for key in keys if key in sources})
