"""Every method as a self-contained Hugging Face folder: configuration_neox_pe.py, a modeling file
holding only the exported method's positional code (templates/positional/<method>.py and what it
`# needs:`), config.json with the auto_map for trust_remote_code, and safetensors weights.

Weights keep this project's names under `model.` (the output head, when untied, is `lm_head`).
KERPLE parameters are exported raw, with the training code's parameterisation in the modeling file
(multiplier = eps + softplus(raw), exponent = eps + (2 - eps) sigmoid(raw)), so a fine-tune of the
export moves them exactly as training would."""
import json
import pathlib
import re

import torch
import transformers
from safetensors.torch import save_file

from megatron.model.positional_embeddings import OPTIONS, option_names, per_run_options
from megatron.quoting import quote

TEMPLATES = pathlib.Path(__file__).parent / "templates"
CONFIG_FILE, MODELING_FILE = "configuration_neox_pe.py", "modeling_neox_pe.py"
AUTO_MAP = {"AutoConfig": "configuration_neox_pe.NeoXPEConfig",
            "AutoModel": "modeling_neox_pe.NeoXPEModel",
            "AutoModelForCausalLM": "modeling_neox_pe.NeoXPEForCausalLM"}


def exportable_methods() -> list[str]:
    """The methods with a positional template (the other templates are parts they share)."""
    return sorted(p.stem for p in (TEMPLATES / "positional").glob("*.py") if "class PositionalMethod(" in p.read_text())


def _parts(name: str, seen: list[str]) -> list[str]:
    """`name` after every part it needs (`# needs: a b` on its first line), each once."""
    text = (TEMPLATES / "positional" / f"{name}.py").read_text()
    needs = re.match(r"# needs: (.*)\n", text)
    for need in needs.group(1).split() if needs else ():
        _parts(need, seen)
    if name not in seen:
        seen.append(name)
    return seen


def modeling_source(method: str) -> str:
    code = "\n\n".join(re.sub(r"\A# needs: .*\n", "", (TEMPLATES / "positional" / f"{part}.py").read_text())
                       for part in _parts(method, []))
    template = (TEMPLATES / MODELING_FILE).read_text()
    return template.replace("{positional_code}", code.rstrip() + "\n\n").replace("{pos_emb}", method)


def per_run_choices(neox_args) -> list[str]:
    """The method's per-run options (rotary-scaling) set away from their default: the templates apply none."""
    return [f"{name.replace('_', '-')} is {quote(getattr(neox_args, name))}" for name in per_run_options(neox_args.pos_emb)
            if getattr(neox_args, name) != OPTIONS[name].default]


def custom_config(neox_args, vocab_size: int, tokenizer) -> dict:
    options = {name: getattr(neox_args, name) for name in option_names(neox_args.pos_emb)}
    return {
        "architectures": ["NeoXPEForCausalLM"], "model_type": "neox_pe", "auto_map": AUTO_MAP,
        "vocab_size": vocab_size, "hidden_size": neox_args.hidden_size, "num_hidden_layers": neox_args.num_layers,
        "num_attention_heads": neox_args.num_attention_heads,
        "intermediate_size": neox_args.intermediate_size or 4 * neox_args.hidden_size,
        "norm": neox_args.norm, "layer_norm_eps": neox_args.layernorm_epsilon, "activation": neox_args.activation,
        "gpt_j_residual": neox_args.gpt_j_residual, "no_weight_tying": neox_args.no_weight_tying,
        "attention_window": neox_args.attention_window, "pos_emb": neox_args.pos_emb,
        "pos_emb_per_layer": neox_args.pos_emb_per_layer, "pos_emb_options": options,
        "max_position_embeddings": neox_args.max_position_embeddings, "train_length": neox_args.seq_length,
        "initializer_range": neox_args.init_method_std, "use_cache": True, "tie_word_embeddings": False,
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
    args = source.neox_args
    (out_dir / CONFIG_FILE).write_text((TEMPLATES / CONFIG_FILE).read_text().replace("{pos_emb}", args.pos_emb))
    (out_dir / MODELING_FILE).write_text(modeling_source(args.pos_emb))
    config = custom_config(args, source.model.vocab_size, source.tokenizer)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": source.tokenizer.eod, "eos_token_id": source.tokenizer.eod,
         "pad_token_id": source.tokenizer.pad, "transformers_version": transformers.__version__}, indent=2) + "\n")
    save_file(custom_state(source.model), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
