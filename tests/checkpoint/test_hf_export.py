"""tools/ckpts/convert_to_hf.py: every positional method exported to Hugging Face gives this project's
logits at 1x and 4x the training length, generates greedily like it (with the export's own KV cache
and tokenizer), and refuses what it cannot export, by message. rotary's reference is transformers' own
GPTNeoXForCausalLM. The command on a real checkpoint, and the export loaded where this project is not installed:
tests/e2e/checkpoint/test_hf_export.py."""
import ast
import pathlib
import sys

import pytest
import torch
import transformers
from tests.support.hf_export import TRAIN_LENGTH, exported, greedy_reference, load_export, tiny_source
from tests.support.layer_patterns import PATTERNS
from tests.support.training import REPO_ROOT

from megatron.text_generation import generate_tokens
from megatron.model import GPTModel
from megatron.model.positional_embeddings import available
from megatron.tokenizer import ByteLevelTokenizer, CharLevelTokenizer, make_tokenizer
from megatron.tokenizer.train_bpe import train_bpe_tokenizer
from tools.ckpts.hf_export import ExportError, export_checkpoint, export_model
from tools.ckpts.hf_export.custom import files_needed
from tools.ckpts.hf_export.native import from_gpt_neox_state
from tools.ckpts.hf_export.tokenizer import export_tokenizer

TEXT = ("Grüße aus Köln — naïve café, 世界 and 🎉; tabs\tand\nnewlines, 'quotes' <|endoftext|> "
        "def f(x):\n    return x ** 2  # ünïcödé\u0100\u01ff\u0200 end")


# Every method at its defaults, then the variants that change what the export must carry: a method's own
# options, a method wrapped (a temperature, DAPE's score edit), an output gate, and layer patterns (a method
# or a window per layer). Each: (method, config overrides).
VARIANTS = {
    "path-fox": ("path", {"path_forget_gate": True}),
    "stickbreaking-attend-current": ("stickbreaking", {"stickbreaking_attend_current": True}),
    "cable-released": ("cable", {"cable_unscaled_scores": True}),
    "scale_invariant-tau3-half-unrotated": ("scale_invariant", {"scale_invariant_tau": 3.0,
                                                                "rotary_unrotated_fraction": 0.5}),
    "dape1": ("kerple_log", {"dape": {"version": 1, "hidden": 8}}),
    "dape2": ("kerple_log", {"dape": {"version": 2, "hidden": 8}}),
    "dape2-authors": ("kerple_log", {"dape": {"version": 2, "hidden": 8, "form": "authors"}}),
    "ssmax": ("kerple_log", {"attention_temperature": {"type": "ssmax"}}),
    "head_scale": ("kerple_log", {"attention_temperature": {"type": "head_scale"}}),
    "irope": ("rotary", {"layer_pattern": [{"pos-emb": "rotary"}, {"pos-emb": "none", "attention-temperature":
                                                                     {"type": "llama4", "scale": 0.7, "floor": 16}}]}),
    "output-gate-head": ("kerple_log", {"attention_output_gate": "head"}),
    "output-gate-channel": ("kerple_log", {"attention_output_gate": "channel"}),
    "sink": ("kerple_log", {"attention_sink": True}),
} | {name: (pattern["pos_emb"], {key: value for key, value in pattern.items() if key != "pos_emb"} | {"rotary_pct": 1.0})
     for name, pattern in PATTERNS.items()}  # the layer-pattern guide's hybrids, as test_layer_pattern builds them
CASES = {method: (method, {}) for method in available()} | VARIANTS


@pytest.mark.parametrize("case", CASES)
def test_the_export_gives_this_projects_logits_generations_and_padded_rows(case, tmp_path):
    """The exported model (loaded by transformers) gives this project's logits at 1x, 4x and 8x the training
    length (4x for `learned`, whose table ends there); greedy generation through the exported tokenizer,
    with the export's own KV cache, reaches 4x the training length as this project's full forwards and
    generate.py's generator do (where the method says its cache is exact); and a left-padded row scores as
    the same row alone (positions count the kept tokens)."""
    torch.set_num_threads(1)
    method, overrides = CASES[case]
    source, folder = exported(method, tmp_path / "hf", **overrides)
    model = load_export(folder)
    if not overrides:
        expected_class = "GPTNeoXForCausalLM" if method in ("rotary", "none") else "NeoXPEForCausalLM"
        assert type(model).__name__ == expected_class
    for factor in (1, 4) if method == "learned" else (1, 4, 8):
        length = factor * TRAIN_LENGTH
        ids = torch.randint(0, 256, (2, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            torch.testing.assert_close(model(ids).logits, source.model(ids), atol=1e-5, rtol=0)

    if all(getattr(pe, "cache_exact", True) for pe in source.model.positional_embeddings()):
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        prompt = "Grüße, wörld: "
        ids = tokenizer(prompt, return_tensors="pt")
        assert ids["input_ids"][0].tolist() == source.tokenizer.tokenize(prompt)
        new = 4 * TRAIN_LENGTH - ids["input_ids"].shape[1]
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
        generated = out[0, ids["input_ids"].shape[1]:].tolist()
        expected = greedy_reference(source.model, source.tokenizer.tokenize(prompt), new)
        assert generated == expected
        # generate.py's generator (KV cache, temperature 0) gives the same continuation.
        assert generate_tokens(source.model.eval(), [source.tokenizer.tokenize(prompt)],
                               max_new_tokens=new)[0] == expected
        assert tokenizer.decode(generated) == source.tokenizer.detokenize(expected) or max(expected) >= 256

    short, long_ = torch.randint(0, 256, (1, 10)), torch.randint(0, 256, (1, 24))
    batch = torch.cat([torch.cat([torch.zeros(1, 14, dtype=torch.long), short], 1), long_])
    mask = torch.ones_like(batch)
    mask[0, :14] = 0
    with torch.no_grad():
        logits = model(batch, attention_mask=mask).logits
        torch.testing.assert_close(logits[0, 14:], source.model(short)[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(logits[1], source.model(long_)[0], atol=1e-5, rtol=0)


def test_rotary_round_trip_through_gpt_neox(tmp_path):
    source, folder = exported("rotary", tmp_path / "hf", no_weight_tying=True, gpt_j_residual=True)
    theirs = transformers.GPTNeoXForCausalLM.from_pretrained(folder).state_dict()
    back = GPTModel(source.model.config).eval()
    back.load_state_dict(from_gpt_neox_state(theirs, 2, 4, tied=False), strict=True)
    ids = torch.randint(0, 256, (1, 40))
    with torch.no_grad():
        assert torch.equal(back(ids), source.model(ids))


# ------------------------------------------------------------------------------------ tokenizers
def _trained_spm(tmp_path):
    import sentencepiece
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((TEXT + "\n" + open(__file__, encoding="utf-8").read()) * 2, encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=300,
                                             minloglevel=2)
    return make_tokenizer("SPMTokenizer", str(tmp_path / "spm.model"))


def _trained_bpe(tmp_path):
    path = tmp_path / "tokenizer.json"
    train_bpe_tokenizer([open(__file__, encoding="utf-8").read(), TEXT] * 3, 400, str(path), show_progress=False)
    return make_tokenizer("HFTokenizer", str(path))


TOKENIZERS = {"ByteLevelTokenizer": lambda tmp, shared: ByteLevelTokenizer(),
              "CharLevelTokenizer": lambda tmp, shared: CharLevelTokenizer(),
              "HFTokenizer": lambda tmp, shared: _trained_bpe(tmp),
              "SPMTokenizer": lambda tmp, shared: _trained_spm(tmp),
              "GPT2BPETokenizer": lambda tmp, shared: make_tokenizer(
                  "GPT2BPETokenizer", str(shared() / "data/gpt2/gpt2-vocab.json"),
                  str(shared() / "data/gpt2/gpt2-merges.txt"))}


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_exported_tokenizer_encodes_like_this_project(kind, tmp_path, request):
    ours = TOKENIZERS[kind](tmp_path, lambda: request.getfixturevalue("shared_dir"))
    export_tokenizer(ours, tmp_path / "hf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    for text in (TEXT, "Hello world", " leading space", "", open(__file__, encoding="utf-8").read()[:3000]):
        assert theirs(text)["input_ids"] == ours.tokenize(text), text[:40]
    assert theirs.eos_token_id == ours.eod
    ids = ours.tokenize(TEXT)
    assert theirs.decode(ids) == ours.detokenize(ids)


# ------------------------------------------------------------------------------------ bad input
def test_missing_checkpoint_is_one_clear_error(tmp_path):
    with pytest.raises(ExportError, match=r"--input_dir .*nowhere/global_step5 does not exist"):
        export_checkpoint(tmp_path / "nowhere/global_step5", tmp_path / "out")


def test_a_method_gpt_neox_cannot_hold_is_refused_by_name(tmp_path):
    with pytest.raises(ExportError, match=r"--target gpt_neox cannot hold this model: pos-emb is 'kerple_log'"):
        export_model(tiny_source("kerple_log"), tmp_path / "out", target="gpt_neox")
    with pytest.raises(ExportError, match=r"norm is 'rmsnorm'"):
        export_model(tiny_source("rotary", norm="rmsnorm"), tmp_path / "out", target="gpt_neox")
    assert not (tmp_path / "out").exists()


def test_output_dir_is_never_overwritten(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"exists and is not empty"):
        export_model(tiny_source("alibi"), tmp_path / "out")


def test_learned_export_refuses_positions_past_its_table(tmp_path):
    _, folder = exported("learned", tmp_path / "hf")
    with pytest.raises(ValueError, match=r"max-position-embeddings=64; got position 64"):
        load_export(folder)(torch.zeros(1, 65, dtype=torch.long))


@pytest.mark.parametrize("method", ["kerple_log", "learned"])
def test_the_exported_length_limit_is_the_models_own(method, tmp_path, capfd):
    """config.json's max_position_embeddings is what transformers warns past and caps a default max_length
    at: a relative method has no such limit (None, so generating past the training config's key neither
    warns nor stops), a learned table has its rows."""
    torch.set_num_threads(1)
    source, folder = exported(method, tmp_path / "hf")
    config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    limit = source.model.positional_embeddings()[0].max_length
    assert config.max_position_embeddings == limit == (4 * TRAIN_LENGTH if method == "learned" else None)
    assert config.neox_max_position_embeddings == source.config.max_position_embeddings
    if method == "kerple_log":
        prompt = torch.randint(0, 256, (1, source.config.max_position_embeddings + 4))
        with torch.no_grad():
            out = load_export(folder).generate(prompt, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert out.shape[1] == prompt.shape[1] + 20  # transformers' default: 20 new tokens, not capped
        assert "maximum length" not in capfd.readouterr().err


# ------------------------------------------------------------------------------------ the project's own code
@pytest.mark.parametrize("method", ["kerple_log", "mep_kerple", "rotary"])
def test_the_export_carries_the_projects_positional_files_unchanged(method, tmp_path):
    source, folder = exported(method, tmp_path / "hf", rotary_scaling={"type": "ntk", "factor": 2.0}
                              if method == "rotary" else None)
    package = REPO_ROOT / "megatron" / "model" / "positional_embeddings"
    copied = sorted(p.name for p in folder.glob("*.py") if (package / p.name).exists())
    module = sys.modules[type(source.model.pos_embs[0]).__module__].__file__
    assert "base.py" in copied and pathlib.Path(module).name in copied
    for name in copied:
        assert (folder / name).read_bytes() == (package / name).read_bytes(), name
    assert "__init__.py" not in copied  # the package's own registry loop is not needed by the export


def test_no_template_implements_a_positional_method():
    """The templates are the decoder, its config and the tokenizer: none defines a channel of the protocol."""
    channels = {"add_to_embeddings", "rotate_qk", "distance_tables", "pairwise", "kernel"}
    for path in (REPO_ROOT / "tools" / "ckpts" / "hf_export").rglob("*.py"):
        defined = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}
        assert not defined & channels, (path, defined & channels)


@pytest.mark.parametrize("scaling,target", [({"type": "linear", "factor": 2.0}, "GPTNeoXForCausalLM"),
                                            ({"type": "yarn", "factor": 4.0, "original-max-position": 16},
                                             "GPTNeoXForCausalLM"),
                                            ({"type": "llama3", "factor": 8.0, "original-max-position": 16,
                                              "low-freq-factor": 1, "high-freq-factor": 4}, "GPTNeoXForCausalLM"),
                                            ({"type": "longrope", "factor": 4.0, "original-max-position": 16,
                                              "short-factor": [1.0, 1.5], "long-factor": [2.0, 7.0]},
                                             "GPTNeoXForCausalLM"),
                                            ({"type": "ntk", "factor": 8.0}, "NeoXPEForCausalLM"),
                                            ({"type": "dynamic_ntk", "factor": 2.0, "original-max-position": 16},
                                             "NeoXPEForCausalLM")])
def test_rotary_scaling_exports_with_the_logits_of_the_scaled_model(scaling, target, tmp_path):
    """linear, yarn, llama3 and longrope as transformers' own rope_parameters (its rope_type); the others in the
    project's rotary.py."""
    source, folder = exported("rotary", tmp_path / "hf", rotary_scaling=scaling)
    plain = tiny_source("rotary").model
    model = load_export(folder)
    assert type(model).__name__ == target
    if target == "GPTNeoXForCausalLM":  # transformers' own rope_type, computed by its modeling_rope_utils
        assert model.config.rope_parameters["rope_type"] == scaling["type"]
    ids = torch.randint(0, 256, (2, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits
        torch.testing.assert_close(logits, source.model(ids), atol=1e-5, rtol=0)
        assert (logits - plain(ids)).abs().max() > 4e-5  # the scaling is applied, not dropped (4x atol)


def test_p_rope_exports_as_the_projects_rotary_with_the_same_logits(tmp_path):
    """rotary-unrotated-fraction (p-RoPE): GPT-NeoX rotates every frequency, so the folder runs rotary.py."""
    source, folder = exported("rotary", tmp_path / "hf", rotary_pct=1.0, rotary_unrotated_fraction=0.5)
    model = load_export(folder)
    assert type(model).__name__ == "NeoXPEForCausalLM"
    ids = torch.randint(0, 256, (2, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, source.model(ids), atol=1e-5, rtol=0)


def test_a_method_file_the_export_cannot_carry_is_refused_by_line(tmp_path):
    package = REPO_ROOT / "megatron" / "model" / "positional_embeddings"
    method = tmp_path / "slopes.py"  # beside copies of its siblings, as if in the package
    for name in ("base.py", "registry.py", "temperature.py", "dape.py"):
        (tmp_path / name).write_bytes((package / name).read_bytes())
    method.write_text("import torch\n\nfrom megatron.model.positional_embeddings import PositionalEmbedding\n")
    with pytest.raises(ExportError, match=r"pos-emb 'slopes' cannot be exported: slopes.py:3 says `from "
                                          r"megatron.model.positional_embeddings import PositionalEmbedding`.*"
                                          r"`from \.base import \.\.\.`"):
        files_needed("slopes", method)
    method.write_text("import torch\n\nfrom .base import PositionalEmbedding\nfrom .registry import register\n")
    assert [p.name for p in files_needed("slopes", method)] == ["slopes.py", "base.py", "temperature.py",
                                                                "dape.py", "registry.py"]
