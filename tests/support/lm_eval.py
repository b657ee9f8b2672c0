"""A tiny kerple_log checkpoint, its Hugging Face export and a folder of local lm-eval tasks (a module
fixture), shared by the lm-eval adapter, RULER and bad-input tests. lm-eval runs offline here."""
import json
import os

import pytest

from tests.support.training import tiny_args

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from megatron.checkpoint.checkpointing import load_model_weights, save_checkpoint  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments.to_model import model_config  # noqa: E402
from megatron.tokenizer import build_tokenizer  # noqa: E402
from megatron.training.loop import setup_model_and_optimizer  # noqa: E402
from tools.ckpts.hf_export import export_checkpoint  # noqa: E402

# Padded vocabulary == tokenizer vocabulary (258 byte-level ids), so HFLM's softmax over every row of
# the output layer and the adapter's over the tokenizer's vocabulary are the same distribution.
MODEL = dict(hidden_size=32, num_attention_heads=2, make_vocab_size_divisible_by=2)


QUESTIONS = [("The capital of France is", [" Paris", " Berlin", " Rome"], 0),
             ("Two plus two equals", [" four", " five"], 0),
             ("Grüße aus", [" Köln", " Wien", " Zürich"], 2)]


DOCUMENTS = ["def add(a, b):\n    return a + b\n", "Längere Sätze über Straßen und Flüsse — naïve café.",
             "import os\nprint(os.getcwd())\n" * 3]


TASKS = {
    "local_mc": ("mc.jsonl", "output_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
                 "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n"),
    "local_rolling": ("docs.jsonl", "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
                      "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n"),
    "local_gen": ("mc.jsonl", "output_type: generate_until\ndoc_to_text: '{{question}}'\n"
                  "doc_to_target: '{{choices[answer]}}'\ngeneration_kwargs:\n  until: ['\\n']\n  max_gen_toks: 6\n"
                  "  do_sample: false\nmetric_list:\n  - metric: exact_match\n"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A kerple_log checkpoint (step 2), its config, its export, and a folder of local tasks."""
    root = tmp_path_factory.mktemp("lm_eval")
    args = tiny_args("unused-data", root, eval_results_dir=str(root / "results"), **MODEL)
    args.join_process_group()
    save_checkpoint(args.checkpoint_run(), setup_model_and_optimizer(args.training_run(), build_tokenizer(args.tokenizer_run()).padded_vocab_size)[0], 2, 32)
    config = root / "run.yml"
    config.write_text(json.dumps({"num-layers": 2, "hidden-size": 32, "num-attention-heads": 2, "seq-length": 64,
                                  "pos-emb": "kerple_log", "no-weight-tying": True, "make-vocab-size-divisible-by": 2,
                                  "tokenizer-type": "ByteLevelTokenizer", "train_micro_batch_size_per_gpu": 1,
                                  "load": str(root / "ckpt"), "eval-results-dir": str(root / "results")}))
    export_checkpoint(root / "ckpt" / "global_step2", root / "hf", [config])
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "mc.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n"
                                            for q, c, a in QUESTIONS))
    (tasks / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCUMENTS))
    for name, (data, body) in TASKS.items():
        (tasks / f"{name}.yaml").write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                            f"    test: {tasks / data}\ntest_split: test\n{body}")
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    load_model_weights(args.inference_run(), model)
    return {"root": root, "config": config, "tasks": tasks, "model": model, "tokenizer": build_tokenizer(args.tokenizer_run())}
