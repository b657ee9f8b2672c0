"""The one place a run's config becomes what building its tokenizer reads (megatron/tokenizer/run_keys.py's
`TokenizerRun`): megatron/tokenizer never reads the run config itself."""
from megatron.tokenizer.run_keys import TokenizerRun


def tokenizer_run(neox_args) -> TokenizerRun:
    return TokenizerRun(tokenizer_type=neox_args.tokenizer_type, vocab_file=neox_args.vocab_file,
                        merge_file=neox_args.merge_file, vocab_divisible_by=neox_args.make_vocab_size_divisible_by)
