"""Every method as a Hugging Face folder made of this project's own positional code: the method's file in
megatron/model/positional_embeddings, and the files of that package it imports, copied verbatim beside
a decoder (templates/modeling_neox_pe.py) that calls only the positional protocol (base.py). A method
added as one file therefore exports with no other change, and nothing here restates a formula.

The folder: configuration_neox_pe.py, modeling_neox_pe.py, the copied files (and the attention's
reference.py, which the decoder attends with), positional_method.py
(generated imports of the model's method classes, `METHODS` by name), config.json with the auto_map for trust_remote_code, and
safetensors weights. transformers' remote-code loader copies a modeling file's `from .x import` files
and needs every absolute import installed, so a copied file may import torch, the standard library and
its siblings (relatively), and nothing of this project outside the `try` block base.py has for that.

Weights keep this project's names under `model.` (the output head, when untied, is `lm_head`), so the
positional parameters load into the same classes that trained them."""
import ast
import inspect
import json
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file

from megatron.model.attention import reference as attention_reference
from megatron.model.positional_embeddings import lookup, option_names

from .errors import ExportError

TEMPLATES = pathlib.Path(__file__).parent / "templates"
CONFIG_FILE, MODELING_FILE, METHOD_FILE = "configuration_neox_pe.py", "modeling_neox_pe.py", "positional_method.py"
# The decoder's attention: the project's reference (megatron/model/attention/reference.py, torch alone), copied.
REFERENCE_FILE = pathlib.Path(inspect.getfile(attention_reference))
AUTO_MAP = {"AutoConfig": "configuration_neox_pe.NeoXPEConfig",
            "AutoModel": "modeling_neox_pe.NeoXPEModel",
            "AutoModelForCausalLM": "modeling_neox_pe.NeoXPEForCausalLM"}
# What the decoder template itself imports from the package (base.py's ModelShape, the temperature.py and dape.py wrappers).
DECODER_NEEDS = ("base", "temperature", "dape")
# Installed wherever the export is used (transformers needs torch); anything else must not be imported.
AVAILABLE_PACKAGES = {"torch", "transformers", "safetensors"}


def _outside_try(tree: ast.AST):
    """The import statements of a module that are not inside a `try` (as transformers' check reads them)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Try):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _outside_try(node)


def package_files(methods) -> list[pathlib.Path]:
    """The files of the methods' package that their exported code needs (see `files_needed`), each once."""
    needed = []
    for method in methods:
        needed += [p for p in files_needed(method, pathlib.Path(inspect.getfile(lookup(method)))) if p not in needed]
    return needed


def files_needed(method: str, method_file: pathlib.Path) -> list[pathlib.Path]:
    """The method's module, base.py, and every sibling they import relatively (`from .x import`), each once,
    or ExportError naming the line that the export could not carry."""
    folder, needed, queue = method_file.parent, [], [method_file] + [method_file.parent / f"{m}.py" for m in DECODER_NEEDS]
    while queue:
        path = queue.pop(0)
        if path in needed:
            continue
        needed.append(path)
        for node in _outside_try(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module and "." not in node.module:
                queue.append(folder / f"{node.module}.py")
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            top = {name.split(".")[0] for name in names}
            if (isinstance(node, ast.ImportFrom) and node.level) or not top <= AVAILABLE_PACKAGES | set(
                    sys.stdlib_module_names):
                raise ExportError(
                    f"pos-emb {method!r} cannot be exported: {path.name}:{node.lineno} says "
                    f"`{ast.unparse(node)}`. The export copies the method's files into a folder that loads with "
                    f"trust_remote_code, where only torch, the standard library and the files of "
                    f"{folder.name}/ (imported as `from .base import ...`, `from .registry import register`) "
                    f"exist. Import them that way in {path.name} and export again.")
    return needed


def method_imports(methods) -> str:
    """positional_method.py: METHODS, {pos-emb name: class} of the model's methods, from the copied files."""
    classes = [lookup(method) for method in methods]
    lines = [f"from .{pathlib.Path(inspect.getfile(cls)).stem} import {cls.__qualname__}" for cls in classes]
    table = ", ".join(f"{cls.name!r}: {cls.__qualname__}" for cls in classes)
    return ('"""Generated by tools/ckpts/convert_to_hf.py: the positional methods of this model by `pos-emb` name,\n'
            'the classes of the files beside this one (copied from the project unchanged)."""\n'
            + "\n".join(lines) + f"\n\nMETHODS = {{{table}}}\n")


def model_methods(model) -> list[str]:
    """The methods of `model`'s positional modules, each once, in order."""
    return list(dict.fromkeys(pe.name for pe in model.positional_embeddings()))


def positional_modules(model) -> list[dict]:
    """Each positional module of `model` as the decoder builds it: method, window and every option."""
    return [{"pos_emb": kind.pos_emb, "window": kind.window, "options": kind.options, "temperature": kind.temperature,
             "dape": kind.dape} for kind in model.module_kinds]


def custom_config(model, tokenizer) -> dict:
    """config.json of the custom folder: the model's ModelConfig as the decoder reads it."""
    config = model.config
    options = {name: config.option(name) for name in option_names(config.pos_emb)}
    return {
        "architectures": ["NeoXPEForCausalLM"], "model_type": "neox_pe", "auto_map": AUTO_MAP,
        "vocab_size": config.padded_vocab_size, "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size or 4 * config.hidden_size,
        "norm": config.norm, "layer_norm_eps": config.layernorm_epsilon, "activation": config.activation,
        "gpt_j_residual": config.gpt_j_residual, "no_weight_tying": config.no_weight_tying,
        "attention_window": config.attention.window, "attention_output_gate": config.attention_output_gate,
        "attention_sink": config.attention_sink,
        "pos_emb": lookup(config.pos_emb).name,
        "pos_emb_per_layer": config.pos_emb_per_layer, "pos_emb_options": options,
        "layer_pattern": config.layer_pattern, "positional_modules": positional_modules(model),
        "layer_module": list(model.layer_module),
        "max_position_embeddings": model.position_limit(), "train_length": config.lengths.get("seq_length"),
        "neox_max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.init_method_std, "use_cache": True, "tie_word_embeddings": False,
        "bos_token_id": tokenizer.eod, "eos_token_id": tokenizer.eod, "pad_token_id": tokenizer.pad,
        "dtype": "float32", "transformers_version": transformers.__version__,
    }


def custom_state(model) -> dict:
    state = {}
    for name, tensor in model.state_dict().items():
        key = "lm_head.weight" if name == "output_head.weight" else f"model.{name}"
        state[key] = tensor.detach().to(torch.float32).contiguous().clone()
    return state


def write_custom(source, out_dir: pathlib.Path) -> None:
    methods = model_methods(source.model)
    for path in package_files(methods):
        (out_dir / path.name).write_bytes(path.read_bytes())
    (out_dir / REFERENCE_FILE.name).write_bytes(REFERENCE_FILE.read_bytes())
    (out_dir / METHOD_FILE).write_text(method_imports(methods))
    (out_dir / CONFIG_FILE).write_bytes((TEMPLATES / CONFIG_FILE).read_bytes())
    (out_dir / MODELING_FILE).write_bytes((TEMPLATES / MODELING_FILE).read_bytes())
    config = custom_config(source.model, source.tokenizer)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": source.tokenizer.eod, "eos_token_id": source.tokenizer.eod,
         "pad_token_id": source.tokenizer.pad, "transformers_version": transformers.__version__}, indent=2) + "\n")
    save_file(custom_state(source.model), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
