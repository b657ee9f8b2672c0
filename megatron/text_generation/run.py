"""What generate.py runs: check the generation keys, load the model, generate for the chosen
`text-gen-type`, print each sample and write them as JSON lines to `sample-output-file`.

Everything that can be known before the model is loaded is checked first (value ranges, the prompt
file, the output path, the memory the KV cache will take), so no mistake is found only after every
sample was generated. `sample-output-file` is never overwritten: a file already there is refused up
front, and the samples are written under a temporary name and linked into place only if the name is
still free."""
import errno
import json
import os
import pathlib
import sys
import tempfile

import torch

from megatron.checkpoint.inference_model import inference_device_and_dtype, load
from megatron.checkpoint.run_keys import InferenceRun
from megatron.output_paths import new_file_problem, not_writable, reported_write
from megatron.run.initialize import join_process_group
from megatron.run.preflight import run_parameter_count
from .errors import GenerationError
from .memory import element_bytes, generation_memory_problem
from .run_keys import GenerationRun
from .samples import generate_samples
from .sampling import setting_problems


def generate_run(generation: GenerationRun, inference: InferenceRun, tokenizer, stdin=None) -> list[dict]:
    """The records written (rank 0), in prompt order: `generation`'s prompts continued by the model `inference`
    loads, `tokenizer` the run's. `stdin` feeds `interactive` (default sys.stdin)."""
    check_generation_keys(generation)
    contexts = read_contexts(generation)
    if generation.world_size > 1:
        join_process_group(generation.seed)
    check_generation_memory(generation, inference, tokenizer, contexts)
    loaded = load(inference.load, inference)
    model, iteration = loaded.model, loaded.step
    say = print if generation.rank == 0 else (lambda *args, **kwargs: None)
    say(f"generating with {inference.model.pos_emb} ({inference.load}, step {iteration}): "
        f"{generation.text_gen_type}, at most {generation.maximum_tokens} tokens per sample", file=sys.stderr,
        flush=True)
    if generation.text_gen_type == "interactive":
        return interact(generation, model, tokenizer, stdin or sys.stdin)
    # Every rank generates every world_size-th prompt; rank 0 gathers, prints and writes them.
    mine = generate_samples(generation, model, tokenizer, contexts[generation.rank::generation.world_size])
    records = mine
    if generation.world_size > 1:
        shares = [None] * generation.world_size
        torch.distributed.all_gather_object(shares, mine)
        records = [shares[i % generation.world_size][i // generation.world_size] for i in range(len(contexts))]
    if generation.rank == 0:
        for item in records:
            show(item)
        write_records(generation.sample_output_file, records, generation.sample_output_force)
    return records


def check_generation_keys(generation: GenerationRun) -> None:
    """What the key types do not already say: value ranges, that the input file is there, and that
    the output file can be written and is not there yet."""
    def fail(key, message):
        raise GenerationError(f"{generation.where(key)}: {key.replace('_', '-')}: {message}")

    for key, message in setting_problems(generation.maximum_tokens, generation.temperature, generation.top_k,
                                         generation.top_p):
        fail(key, message)
    for key in ("num_samples", "generation_batch_size"):
        if getattr(generation, key) < 1:
            fail(key, f"must be a positive integer, got {getattr(generation, key)}.")
    if generation.text_gen_type in ("input-file", "interactive") and generation.prompt_end == "":
        fail("prompt_end", "is empty, so prompts cannot be told apart: set it to the text that ends each prompt "
             "(the default is a newline, \"\\n\").")
    if generation.text_gen_type == "input-file":
        path = generation.sample_input_file
        if not path:
            fail("text_gen_type", "is 'input-file', but sample-input-file is not set: set it to a text file "
                 "with one prompt per line (or per prompt-end).")
        if not pathlib.Path(path).is_file():
            fail("sample_input_file", f"{path} does not exist (or is not a file): point it at a text file with "
                 "one prompt per line (or per prompt-end).")
    if generation.text_gen_type == "interactive" and generation.world_size > 1:
        fail("text_gen_type", "is 'interactive', which reads prompts from one terminal: run it with "
             "`python generate.py`, not on several ranks.")
    if generation.sample_output_file:
        path = pathlib.Path(generation.sample_output_file)
        if generation.sample_output_force and path.is_file():  # to be replaced: its folder must take the new one
            problem = not_writable(path.parent)
        else:
            problem = new_file_problem(path)
            if problem and path.exists() and not path.is_dir():
                problem += " (generate.py replaces it only when given --force: sample-output-force: true.)"
        if problem:
            fail("sample_output_file", problem)


def check_generation_memory(generation: GenerationRun, inference: InferenceRun, tokenizer, contexts: list[str]) -> None:
    """Refuse, before the model is loaded, a generation whose weights and KV cache cannot fit."""
    size = generation.generation_batch_size
    if generation.text_gen_type == "interactive":  # one prompt at a time, of unknown length
        batches, longest = [1], 1
    else:
        mine = contexts[generation.rank::generation.world_size] or [""]
        batches = [len(mine[i:i + size]) for i in range(0, len(mine), size)]
        longest = max(len(tokenizer.tokenize(text)) if text else 1 for text in mine)
    _, dtype = inference_device_and_dtype(inference)
    vocab, model = tokenizer.padded_vocab_size, inference.model
    problem = generation_memory_problem(
        num_layers=model.num_layers, hidden=model.hidden_size, vocab=vocab, dtype=dtype,
        batch=max(batches), longest_prompt=longest, max_new_tokens=generation.maximum_tokens,
        recompute=generation.recompute, weights_bytes=run_parameter_count(model, vocab) * element_bytes(dtype),
        where=generation.where("maximum_tokens"))
    if problem:
        raise GenerationError(problem)


def read_contexts(generation: GenerationRun) -> list[str]:
    """The prompts of this run: num-samples empty ones, or sample-input-file's (as upstream: split on
    prompt-end, stripped, empty ones dropped)."""
    if generation.text_gen_type == "unconditional":
        return [""] * generation.num_samples
    if generation.text_gen_type == "interactive":
        return []
    path = pathlib.Path(generation.sample_input_file)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise GenerationError(f"sample-input-file {path} cannot be read ({err.strerror}); make it readable or "
                              "point sample-input-file at another file.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise GenerationError(f"sample-input-file {path} is not UTF-8 text: byte {data[err.start]:#04x} at offset "
                              f"{err.start} (line {line}) does not decode. Save the prompts as UTF-8 (e.g. "
                              f"`iconv -f latin1 -t utf-8 {path.name} > prompts.txt`).") from None
    contexts = [p.strip() for p in text.split(generation.prompt_end) if p.strip()]
    if not contexts:
        raise GenerationError(f"sample-input-file {generation.sample_input_file} holds no prompts (it is empty "
                              f"or only whitespace); write one prompt per line (or per prompt-end).")
    return contexts


def interact(generation: GenerationRun, model, tokenizer, stdin) -> list[dict]:
    """Prompt, continuation, repeat until end of input (Ctrl-D)."""
    records = []
    while True:
        print("prompt> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            break
        context = line.rstrip("\n").split(generation.prompt_end)[0]
        records += generate_samples(generation, model, tokenizer, [context])
        show(records[-1])
    write_records(generation.sample_output_file, records, generation.sample_output_force)
    return records


def show(item: dict) -> None:
    print(f"{item['context']}{item['text']}" + (f"\n[{item['message']}]" if item["message"] else ""))
    print("-" * 40, flush=True)


def write_records(path, records, replace: bool = False) -> None:
    if not path:
        return
    with reported_write(path, f"the {len(records)} samples", "sample-output-file"):
        written = write_new_file(pathlib.Path(path), "".join(json.dumps(item) + "\n" for item in records), replace)
    moved = "" if written == pathlib.Path(path) else (f" ({path} appeared while generating, by another process, "
                                                      "and is never overwritten)")
    print(f"wrote {len(records)} samples to {written}{moved}", file=sys.stderr, flush=True)


def write_new_file(path: pathlib.Path, text: str, replace: bool = False) -> pathlib.Path:
    """Write `text` under a temporary name in `path`'s folder, then link it to `path` only if that name
    is still free (no reader sees half a file, nothing is overwritten). Should `path` have appeared since
    it was checked, the file gets the first free name `<stem>-2<suffix>`, `-3`, ...; returns the path
    written. `replace` (--force): renamed over `path` instead, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".samples-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; a sample file is as readable as any other
        if replace:
            os.replace(tmp, path)
            return path
        for n in range(1, 1000):
            target = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                continue
            except OSError as err:  # a file system without hard links: rename, after looking
                if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK) or target.exists():
                    raise
                os.replace(tmp, target)
                return target
        raise GenerationError(f"{path} and 998 numbered names beside it exist; give sample-output-file a new name.")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
