"""Text in, sample records out: upstream NeoX's fields `context`, `text` (the continuation only),
`length` (its tokens), `finished` (it ended with the end-of-document token) and `message`."""
from .generation import generate_tokens
from .run_keys import GenerationRun

DID_NOT_START = ("WARNING: text generation did not start: the first token generated was the end-of-document "
                 "token; sample with a temperature or give a longer prompt")


def generate_samples(generation: GenerationRun, model, tokenizer, contexts: list[str]) -> list[dict]:
    """One record per context, generated `generation-batch-size` at a time with the config's settings;
    an empty context starts from the end-of-document token (an unconditional sample)."""
    records = []
    size = generation.generation_batch_size
    for start in range(0, len(contexts), size):
        batch = contexts[start:start + size]
        prompts = [tokenizer.tokenize(text) if text else [tokenizer.eod] for text in batch]
        continuations = generate_tokens(
            model, prompts, max_new_tokens=generation.maximum_tokens, temperature=generation.temperature,
            top_k=generation.top_k, top_p=generation.top_p, eos=tokenizer.eod, recompute=generation.recompute,
            seed=generation.seed + start, vocab_size=tokenizer.vocab_size)
        records += [record(text, tokens, tokenizer.eod, tokenizer) for text, tokens in zip(batch, continuations)]
    return records


def record(context: str, tokens: list[int], eod: int, tokenizer) -> dict:
    finished = bool(tokens) and tokens[-1] == eod
    text_tokens = tokens[:-1] if finished else tokens
    return {"context": context, "text": tokenizer.detokenize(text_tokens), "length": len(text_tokens),
            "finished": finished, "message": DID_NOT_START if finished and not text_tokens else None}
