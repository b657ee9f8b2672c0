"""Tiny models and exports shared by the export, lm-eval and method tests."""
import torch

from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import build_tokenizer
from tools.ckpts.hf_export import Source, export_model

TRAIN_LENGTH = 16


def tiny_config(method: str, **overrides) -> dict:
    config = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": TRAIN_LENGTH,
              "train_micro_batch_size_per_gpu": 1, "pos_emb": method, "tokenizer_type": "ByteLevelTokenizer",
              "rotary_pct": 0.5, "rpe_max_distance": 32, "fire_init_L": 16.0}
    if method == "learned":  # a table for 4x the training length, so the 4x checks apply to it too
        config["max_position_embeddings"] = 4 * TRAIN_LENGTH
    return config | overrides


def tiny_source(method: str, seed: int = 0, **overrides) -> Source:
    """A model with every positional parameter (and attention sink) moved off its initial value (a trained
    model's are)."""
    args = NeoXArgs.from_dict(tiny_config(method, **overrides))
    tokenizer = build_tokenizer(args.tokenizer_run())
    torch.manual_seed(seed)
    model = GPTModel(model_config(args, tokenizer.padded_vocab_size)).eval()
    with torch.no_grad():
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
        for name, p in model.named_parameters():
            if name.endswith("attention.sink"):
                p.add_(torch.randn_like(p))
    return Source(model.config, model, tokenizer, step=1)


def exported(method: str, folder, **overrides):
    """(source, folder) of a tiny model exported with the tool."""
    source = tiny_source(method, **overrides)
    export_model(source, folder)
    return source, folder


def load_export(folder):
    """An exported folder loaded as a user loads it: transformers' AutoModelForCausalLM with its remote code."""
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()


def greedy_reference(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy decoding by a full forward of this project's model per token (no cache): the plain loop
    every cached generator must agree with."""
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([tokens]))[0, -1]
            tokens.append(int(logits.argmax()))
    return tokens[len(prompt):]


