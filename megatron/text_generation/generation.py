"""`generate_tokens`: continuations of a batch of token prompts, with a KV cache or by recomputing."""
import torch

from .errors import GenerationError
from .memory import generation_memory_problem
from .sampling import choose_next, setting_problems
from .steps import CachedSteps, RecomputedSteps


def generate_tokens(model, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 0.0,
                    top_k: int = 0, top_p: float = 0.0, eos: int | None = None, recompute: bool = False,
                    seed: int = 0, vocab_size: int | None = None) -> list[list[int]]:
    """Continuations (new token ids only, stopping after eos when given) for a batch of prompts of
    different lengths; temperature 0 (or top_k 1) is greedy. `model` is this project's GPTModel in eval mode.

    A continuation that stops at `eos` ends with it. `recompute` runs a full forward of every sequence
    at each step instead of using the KV cache (same tokens, slower). Sampling draws from a generator
    seeded with `seed`: the same prompts, batch and seed give the same tokens. `vocab_size` (the
    tokenizer's, without the embedding's padding rows) keeps the padding rows from being chosen."""
    check_request(model, prompts, max_new_tokens, temperature, top_k, top_p, recompute)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    continuations = [[] for _ in prompts]
    finished = [False] * len(prompts)
    if max_new_tokens == 0:
        return continuations
    with torch.inference_mode():
        steps = (RecomputedSteps(model, prompts, device) if recompute
                 else CachedSteps(model, prompts, device, max_new_tokens))
        logits = steps.first()  # [b, V]
        for step in range(max_new_tokens):
            if vocab_size is not None:
                logits[:, vocab_size:] = float("-inf")
            tokens = choose_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
            for row, token in enumerate(tokens.tolist()):
                if not finished[row]:
                    continuations[row].append(token)
                    finished[row] = token == eos
            if all(finished) or step == max_new_tokens - 1:
                break
            # Finished rows keep stepping with the batch (their tokens are dropped): one batch shape.
            logits = steps.next(tokens)
    return continuations


def check_request(model, prompts, max_new_tokens, temperature, top_k, top_p, recompute=False) -> None:
    """Each bad argument is one GenerationError saying what to change; so is a request whose KV cache
    (or, recomputing, whose longest forward) cannot fit in the memory the device has free."""
    if model.training:
        raise GenerationError("generate_tokens needs the model in eval mode (call model.eval()): dropout "
                              "would make generation random and differ from the cache's numbers.")
    if not prompts:
        raise GenerationError("no prompts to continue: give a list of token-id lists.")
    empty = [i for i, p in enumerate(prompts) if len(p) == 0]
    if empty:
        raise GenerationError(f"prompt(s) {empty} are empty: a model needs at least one token to continue "
                              "(start an unconditional sample with the tokenizer's end-of-document id).")
    problems = setting_problems(max_new_tokens, temperature, top_k, top_p)
    if problems:
        raise GenerationError("bad generation settings: " + " ".join(f"{key} {message}" for key, message in problems))
    limit = model.position_limit()
    longest = max(len(p) for p in prompts)
    # The last token is only chosen, never embedded: positions 0 .. longest + max_new_tokens - 2 are.
    if limit is not None and (longest > limit or longest + max_new_tokens - 1 > limit):
        method = model.positional_embeddings()[0].name
        what = (f"the longest prompt has {longest} tokens" if longest > limit else
                f"a prompt of {longest} tokens plus maximum_tokens={max_new_tokens} needs "
                f"{longest + max_new_tokens - 1} positions")
        fix = (f"shorten the prompt to at most {limit} tokens" if longest > limit else
               f"set maximum_tokens to at most {limit - longest + 1}")
        raise GenerationError(
            f"pos-emb '{method}' embeds at most {limit} positions (max-position-embeddings), but {what}. "
            f"It has no embedding past its table, so it cannot generate beyond it: {fix}, or use a relative "
            "method (e.g. kerple_log), which generates past the training length.")
    embedding = model.word_embeddings
    problem = generation_memory_problem(
        num_layers=len(model.layers), hidden=embedding.embedding_dim, vocab=embedding.num_embeddings,
        dtype=embedding.weight.dtype, batch=len(prompts), longest_prompt=longest, max_new_tokens=max_new_tokens,
        recompute=recompute)
    if problem:
        raise GenerationError(problem)
