"""The KV cache against its reference, a full forward without cache, for every registered method,
4x past the training length, with batched prompts of different lengths; and the generation loop's
sampling, stopping and errors (megatron/text_generation, megatron/model/kv_cache.py)."""
import pytest
import torch

from megatron.model.attention.cached import plan_cached
from megatron.model.positional_embeddings import available
from megatron.text_generation import GenerationError, generate_tokens
from megatron.text_generation.sampling import filter_logits
from megatron.text_generation.steps import CachedSteps
from tests.support.generation import PROMPTS, TRAIN_LENGTH, VOCAB, assert_cache_matches_full_forward, tiny_model

NEW_TOKENS = 4 * TRAIN_LENGTH - len(PROMPTS[0])  # the longest row reaches 4x the training length


@pytest.mark.parametrize("method", available())
def test_cached_logits_equal_a_full_forward_at_every_step_to_4x_the_training_length(method):
    assert_cache_matches_full_forward(tiny_model(method), PROMPTS, NEW_TOKENS)


@pytest.mark.parametrize("overrides", [{"attention_window": 5}, {"pos_emb_per_layer": True},
                                       {"pos_emb": "fire", "attention_window": 6}],
                         ids=["window", "per-layer", "fire-window"])
def test_cache_with_a_window_and_per_layer_kernels(overrides):
    assert_cache_matches_full_forward(tiny_model(**overrides), PROMPTS, 20)


@pytest.mark.parametrize("method", ["fire", "learned", "rotary"])
def test_padding_does_not_leak_a_row_generates_the_same_alone_and_in_a_batch(method):
    model = tiny_model(method)
    together = generate_tokens(model, PROMPTS, max_new_tokens=12)
    alone = [generate_tokens(model, [prompt], max_new_tokens=12)[0] for prompt in PROMPTS]
    assert together == alone


def test_decoding_keeps_memory_linear_in_the_length():
    model = tiny_model("fire")  # fire: terms from pairwise, with the query position itself
    steps = CachedSteps(model, PROMPTS, torch.device("cpu"), 40)
    with torch.inference_mode():
        steps.first()
        for _ in range(30):
            steps.next(torch.tensor([1, 2, 3]))
        length = len(PROMPTS[0]) + 30
        assert steps.cache.length == length
        # A decoding step's score terms: one query per row against the L keys, never L x L.
        plan = plan_cached(model.pos_embs[0], steps.cache, 1, None)
    assert plan.bias.shape == (3, 4, 1, length) and plan.allowed.shape == (3, 1, 1, length)
    assert steps.cache.layers[0].keys.shape == (3, 4, len(PROMPTS[0]) + 40, 16)  # allocated once


def test_greedy_is_deterministic_and_top_k_1_is_greedy():
    model = tiny_model("kerple_log")
    greedy = generate_tokens(model, PROMPTS, max_new_tokens=10)
    assert greedy == generate_tokens(model, PROMPTS, max_new_tokens=10)
    assert greedy == generate_tokens(model, PROMPTS, max_new_tokens=10, temperature=1.5, top_k=1, seed=7)


def test_sampling_follows_the_seed_and_recompute_draws_the_same_tokens():
    model = tiny_model("alibi")
    settings = {"max_new_tokens": 16, "temperature": 1.0, "top_p": 0.95, "vocab_size": VOCAB}
    first = generate_tokens(model, PROMPTS, seed=3, **settings)
    assert first == generate_tokens(model, PROMPTS, seed=3, **settings)
    assert first == generate_tokens(model, PROMPTS, seed=3, recompute=True, **settings)
    assert first != generate_tokens(model, PROMPTS, seed=4, **settings)
    assert all(token < VOCAB for row in first for token in row)  # never the embedding's padding rows


def test_generation_stops_after_eos_and_the_other_rows_go_on():
    model = tiny_model("kerple_log")
    free = generate_tokens(model, PROMPTS, max_new_tokens=12)
    eos = free[0][3]
    stopped = generate_tokens(model, PROMPTS, max_new_tokens=12, eos=eos)
    for row, tokens in zip(free, stopped):
        end = row.index(eos) + 1 if eos in row else len(row)
        assert tokens == row[:end]  # ends with eos, or runs to max_new_tokens
    assert stopped[0][-1] == eos and len(stopped[0]) == free[0].index(eos) + 1


def test_filter_logits_keeps_the_top_k_and_the_nucleus():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 3.0]]).log_softmax(-1)  # p = .24 .09 .03 .01 .63 (rounded)
    kept = lambda filtered: (filtered > float("-inf")).squeeze(0).tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, False, False, False, True]
    assert kept(filter_logits(logits, top_p=0.5)) == [False, False, False, False, True]  # .63 >= .5
    assert kept(filter_logits(logits, top_p=0.8)) == [True, False, False, False, True]  # .63 + .24 >= .8
    assert kept(filter_logits(logits, top_p=0.9)) == [True, True, False, False, True]


def test_learned_cannot_generate_past_its_table():
    model = tiny_model("learned")  # 64 positions
    with pytest.raises(GenerationError, match=r"embeds at most 64 positions .* the longest prompt has 70 tokens.*"
                       r"shorten the prompt to at most 64 tokens"):
        generate_tokens(model, [[1] * 70], max_new_tokens=1)
    with pytest.raises(GenerationError, match=r"a prompt of 11 tokens plus maximum_tokens=60 needs 70 positions.*"
                       r"set maximum_tokens to at most 54"):
        generate_tokens(model, PROMPTS, max_new_tokens=60)
    assert len(generate_tokens(model, PROMPTS, max_new_tokens=54)[0]) == 54  # the whole table, and no more


def test_bad_requests_are_clear_errors():
    model = tiny_model("kerple_log")
    with pytest.raises(GenerationError, match=r"prompt\(s\) \[1\] are empty"):
        generate_tokens(model, [[1], []], max_new_tokens=3)
    with pytest.raises(GenerationError, match=r"top_p must lie in \[0, 1\] \(0 is off\), got 1.5"):
        generate_tokens(model, [[1]], max_new_tokens=3, top_p=1.5)
    with pytest.raises(GenerationError, match="eval mode"):
        generate_tokens(model.train(), [[1]], max_new_tokens=3)
