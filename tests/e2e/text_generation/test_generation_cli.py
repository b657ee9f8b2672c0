"""generate.py end to end on tiny trained checkpoints: text past the training length, upstream's
JSON-lines records, the three text-gen-types, and one clear error per bad input."""
import io
import json

import pytest

from megatron.checkpoint.checkpointing import CheckpointError
from megatron.neox_arguments import NeoXArgsError
from megatron.text_generation import GenerationError, generate_tokens
from megatron.checkpoint.inference_model import load
from megatron.tokenizer import build_tokenizer
from tests.support.generation import generate_run_of
from tests.support.training import REPO_ROOT, TINY, pretrain, run_script, set_flags, tiny_args, tiny_overrides

GENERATION = REPO_ROOT / "configs" / "text_generation.yml"
PROMPTS = ["def main(", "import os", "class Foo(object):"]


@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    """Checkpoints of kerple_log (30 steps) and learned (2 steps) -> {method: overrides}."""
    root = tmp_path_factory.mktemp("generation")
    runs = {}
    for method, steps in (("kerple_log", 30), ("learned", 2)):
        overrides = tiny_overrides(stdlib_data, root / method, pos_emb=method, train_iters=steps, eval_iters=0)
        pretrain(tiny_args(stdlib_data, root / method, pos_emb=method, train_iters=steps, eval_iters=0))
        runs[method] = overrides
    (root / "prompts.txt").write_text("\n".join(PROMPTS) + "\n\n")
    return root, runs


def generation_args(overrides, **generation):
    from megatron.neox_arguments import NeoXArgs
    return NeoXArgs.from_ymls([TINY, GENERATION], {**overrides, **generation})
def test_generate_py_prints_text_past_the_training_length(trained):
    root, runs = trained
    output = root / "unconditional.jsonl"
    result = run_script(["generate.py", str(TINY), str(GENERATION), *set_flags(runs["kerple_log"]),
                         "--set", "maximum_tokens=160", "--set", f"sample-output-file={output}"])  # 2.5x seq-length
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 2  # num-samples in configs/text_generation.yml
    for record in records:
        assert record["context"] == "" and record["text"] in result.stdout
        # Byte-level tokens: beyond 64 tokens unless the sample ended (the end-of-document token).
        assert record["length"] == 160 or record["finished"]
    assert any(record["length"] > 64 for record in records)
    assert "generating with kerple_log" in result.stderr
def test_input_file_writes_upstream_records_of_the_continuation_only(trained):
    root, runs = trained
    args = generation_args(runs["kerple_log"], text_gen_type="input-file", sample_input_file=str(root / "prompts.txt"),
                           sample_output_file=str(root / "out" / "samples.jsonl"), maximum_tokens=40, temperature=0.0)
    returned = generate_run_of(args)
    records = [json.loads(line) for line in (root / "out" / "samples.jsonl").read_text().splitlines()]
    assert records == returned
    assert [r["context"] for r in records] == PROMPTS
    assert all(set(r) == {"context", "text", "length", "finished", "message"} for r in records)
    # The same continuations straight from generate_tokens on the same checkpoint, each prompt alone.
    tokenizer = build_tokenizer(args.tokenizer_run())
    model = load(args.load, args.inference_run()).model
    for record, prompt in zip(records, PROMPTS):
        tokens = generate_tokens(model, [tokenizer.tokenize(prompt)], max_new_tokens=40, eos=tokenizer.eod)[0]
        finished = tokens[-1:] == [tokenizer.eod]
        assert record["finished"] == finished
        assert record["text"] == tokenizer.detokenize(tokens[:-1] if finished else tokens)
        assert record["length"] == len(tokens) - finished
def test_recompute_gives_the_same_samples_and_interactive_reads_stdin(trained):
    _, runs = trained
    cached = generate_run_of(generation_args(runs["kerple_log"], num_samples=3, maximum_tokens=30, top_p=0.9))
    recomputed = generate_run_of(generation_args(runs["kerple_log"], num_samples=3, maximum_tokens=30, top_p=0.9,
                                                 recompute=True))
    assert [r["text"] for r in cached] == [r["text"] for r in recomputed]
    interactive = generate_run_of(generation_args(runs["kerple_log"], text_gen_type="interactive", maximum_tokens=20,
                                                  temperature=0.0), stdin=io.StringIO("def main(\nimport os\n"))
    assert [r["context"] for r in interactive] == ["def main(", "import os"]
def test_bad_inputs_are_one_clear_error_each(trained, tmp_path):
    root, runs = trained
    with pytest.raises(CheckpointError, match=r"checkpoint directory .*nowhere \(config key `load`\) does not exist"):
        generate_run_of(generation_args(runs["kerple_log"], load=str(tmp_path / "nowhere")))
    with pytest.raises(NeoXArgsError, match=r"text-gen-type is 'input_file', which is not one of .*Did you mean "
                       r"'input-file'\?"):
        generation_args(runs["kerple_log"], text_gen_type="input_file")
    with pytest.raises(GenerationError, match=r"is 'input-file', but sample-input-file is not set"):
        generate_run_of(generation_args(runs["kerple_log"], text_gen_type="input-file"))
    with pytest.raises(GenerationError, match=r"command line: sample-input-file: .*missing.txt does not exist"):
        generate_run_of(generation_args(runs["kerple_log"], text_gen_type="input-file",
                                        sample_input_file=str(tmp_path / "missing.txt")))
    (tmp_path / "long.txt").write_text("x" * 100 + "\n")
    with pytest.raises(GenerationError, match=r"pos-emb 'learned' embeds at most 64 positions .* the longest prompt "
                       r"has 100 tokens"):
        generate_run_of(generation_args(runs["learned"], text_gen_type="input-file",
                                        sample_input_file=str(tmp_path / "long.txt")))
    with pytest.raises(GenerationError, match=r"top-p: must lie in \[0, 1\]"):
        generate_run_of(generation_args(runs["kerple_log"], top_p=2.0))
def test_the_entry_point_prints_an_error_without_a_traceback(trained, tmp_path):
    _, runs = trained
    result = run_script(["generate.py", str(TINY), str(GENERATION), *set_flags(runs["kerple_log"]),
                         "--set", "text-gen-type=input-file", "--set", f"sample-input-file={tmp_path / 'none.txt'}"])
    assert result.returncode == 2
    assert result.stderr.startswith("error: command line: sample-input-file:") and "Traceback" not in result.stderr
