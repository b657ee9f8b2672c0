"""What generate.py runs: check the generation keys, load the model, generate for the chosen
`text-gen-type`, print each sample and write them as JSON lines to `sample-output-file`."""
import json
import pathlib
import sys

import torch

from megatron.initialize import initialize_megatron
from megatron.tokenizer import build_tokenizer
from .errors import GenerationError
from megatron.inference_model import load_model
from .samples import generate_samples
from .sampling import setting_problems


def generate_run(neox_args, stdin=None) -> list[dict]:
    """The records written (rank 0), in prompt order. `stdin` feeds `interactive` (default sys.stdin)."""
    check_generation_keys(neox_args)
    contexts = read_contexts(neox_args)
    if neox_args.world_size > 1:
        initialize_megatron(neox_args)
    tokenizer = build_tokenizer(neox_args)
    model, iteration = load_model(neox_args, tokenizer)
    say = print if neox_args.rank == 0 else (lambda *args, **kwargs: None)
    say(f"generating with {neox_args.pos_emb} ({neox_args.load}, step {iteration}): {neox_args.text_gen_type}, "
        f"at most {neox_args.maximum_tokens} tokens per sample", file=sys.stderr, flush=True)
    if neox_args.text_gen_type == "interactive":
        return interact(neox_args, model, tokenizer, stdin or sys.stdin)
    # Every rank generates every world_size-th prompt; rank 0 gathers, prints and writes them.
    mine = generate_samples(neox_args, model, tokenizer, contexts[neox_args.rank::neox_args.world_size])
    records = mine
    if neox_args.world_size > 1:
        shares = [None] * neox_args.world_size
        torch.distributed.all_gather_object(shares, mine)
        records = [shares[i % neox_args.world_size][i // neox_args.world_size] for i in range(len(contexts))]
    if neox_args.rank == 0:
        for item in records:
            show(item)
        write_records(neox_args.sample_output_file, records)
    return records


def check_generation_keys(neox_args) -> None:
    """What the key types do not already say: value ranges, and that the input file is there."""
    def fail(key, message):
        where = neox_args.config_sources.get(key, "the config")
        raise GenerationError(f"{where}: {key.replace('_', '-')}: {message}")

    for key, message in setting_problems(neox_args.maximum_tokens, neox_args.temperature, neox_args.top_k,
                                         neox_args.top_p):
        fail(key, message)
    for key in ("num_samples", "generation_batch_size"):
        if getattr(neox_args, key) < 1:
            fail(key, f"must be a positive integer, got {getattr(neox_args, key)}.")
    if neox_args.text_gen_type == "input-file":
        path = neox_args.sample_input_file
        if not path:
            fail("text_gen_type", "is 'input-file', but sample-input-file is not set: set it to a text file "
                 "with one prompt per line (or per prompt-end).")
        if not pathlib.Path(path).is_file():
            fail("sample_input_file", f"{path} does not exist (or is not a file): point it at a text file with "
                 "one prompt per line (or per prompt-end).")
    if neox_args.text_gen_type == "interactive" and neox_args.world_size > 1:
        fail("text_gen_type", "is 'interactive', which reads prompts from one terminal: run it with "
             "`python generate.py`, not on several ranks.")


def read_contexts(neox_args) -> list[str]:
    """The prompts of this run: num-samples empty ones, or sample-input-file's (as upstream: split on
    prompt-end, stripped, empty ones dropped)."""
    if neox_args.text_gen_type == "unconditional":
        return [""] * neox_args.num_samples
    if neox_args.text_gen_type == "interactive":
        return []
    text = pathlib.Path(neox_args.sample_input_file).read_text(encoding="utf-8")
    contexts = [p.strip() for p in text.split(neox_args.prompt_end) if p.strip()]
    if not contexts:
        raise GenerationError(f"sample-input-file {neox_args.sample_input_file} holds no prompts (it is empty "
                              f"or only whitespace); write one prompt per line (or per prompt-end).")
    return contexts


def interact(neox_args, model, tokenizer, stdin) -> list[dict]:
    """Prompt, continuation, repeat until end of input (Ctrl-D)."""
    records = []
    while True:
        print("prompt> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            break
        context = line.rstrip("\n").split(neox_args.prompt_end)[0]
        records += generate_samples(neox_args, model, tokenizer, [context])
        show(records[-1])
    write_records(neox_args.sample_output_file, records)
    return records


def show(item: dict) -> None:
    print(f"{item['context']}{item['text']}" + (f"\n[{item['message']}]" if item["message"] else ""))
    print("-" * 40, flush=True)


def write_records(path, records) -> None:
    if not path:
        return
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in records), encoding="utf-8")
    print(f"wrote {len(records)} samples to {path}", file=sys.stderr, flush=True)
