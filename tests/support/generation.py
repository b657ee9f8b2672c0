"""A tiny model of every registered method at a training length of 16, the prompts the cache tests decode,
and the check that cached decoding equals a full forward at every step: shared by the KV-cache, method,
evaluation and probe tests; and generate.py's run of a config."""
import torch

from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.text_generation import generate_tokens
from megatron.text_generation.run import generate_run
from megatron.text_generation.steps import CachedSteps
from megatron.tokenizer import build_tokenizer
from tests.support.training import TINY

TRAIN_LENGTH = 16


def generate_run_of(args: NeoXArgs, stdin=None) -> list[dict]:
    """generate.py's run of `args`: its generation keys, its model's inference keys and its tokenizer."""
    return generate_run(args.generation_run(), args.inference_run(), build_tokenizer(args.tokenizer_run()), stdin)


PROMPTS = [[5, 17, 3, 99, 41, 8, 250, 12, 64, 7, 30], [200, 4], [9, 9, 120, 33, 2, 71, 18]]  # 11, 2, 7 tokens


VOCAB = 258  # the byte-level tokenizer's ids; the model's embedding is padded to 384


def tiny_model(pos_emb="kerple_log", **overrides) -> GPTModel:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # sdpa: the full-forward reference materialises its terms; block 8: the prompts are run through
    # the cache in blocks of 8 queries, so the prefill crosses a block boundary. fire-init-L 8: fire's
    # bias depends on the query position i past i = L, so within these lengths.
    values = {"pos_emb": pos_emb, "seq_length": TRAIN_LENGTH, "max_position_embeddings": 4 * TRAIN_LENGTH,
              "attention_impl": "sdpa", "attention_block_size": 8, "fire_init_L": 8.0, **overrides}
    model = GPTModel(model_config(NeoXArgs.from_ymls([TINY], values), 384)).eval()
    with torch.no_grad():  # random kernel parameters, not the identical initial ones, so heads differ
        for pe in model.positional_embeddings():
            for parameter in pe.parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def full_forward_logits(model, sequence) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([sequence]))[0, -1]


def assert_cache_matches_full_forward(model, prompts, new_tokens):
    tokens = generate_tokens(model, prompts, max_new_tokens=new_tokens)
    assert tokens == generate_tokens(model, prompts, max_new_tokens=new_tokens, recompute=True)
    steps = CachedSteps(model, prompts, torch.device("cpu"), new_tokens)
    with torch.inference_mode():
        cached = steps.first()
        for step in range(new_tokens):
            for row, prompt in enumerate(prompts):
                reference = full_forward_logits(model, prompt + tokens[row][:step])
                torch.testing.assert_close(cached[row], reference, rtol=0, atol=1e-5,
                                           msg=lambda m: f"row {row}, step {step}: {m}")
                assert tokens[row][step] == int(cached[row].argmax())
            if step < new_tokens - 1:
                cached = steps.next(torch.tensor([t[step] for t in tokens]))
    return tokens
