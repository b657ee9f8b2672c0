"""The fork's per-stage state dicts -> this project's GPTModel state dict, every tensor checked.

Names map one to one except the fused query/key/value projection: NeoX lays its 3*hidden output rows
out as [heads, 3, head_dim] (each head's q, k, v together; split_tensor_along_last_dim after a view
to [.., heads, 3*head_dim]), this project as [3, heads, head_dim] (transformer.py views the output as
(3, H, D)), so rows are permuted, biases alike.
"""
import torch

from .layout import CheckpointImportError
from .positional import POSITIONAL_PREFIXES, SUPPORTED, bf16_distance_note, convert_positional, expected_keys

# the fork's / upstream's layer names -> this project's (upstream later renamed the MLP to linear1/2)
LAYER_NAMES = {
    "input_layernorm": "input_layernorm", "post_attention_layernorm": "post_attention_layernorm",
    "attention.query_key_value": "attention.query_key_value", "attention.dense": "attention.dense",
    "mlp.dense_h_to_4h": "mlp.dense_h_to_4h", "mlp.dense_4h_to_h": "mlp.dense_4h_to_h",
    "mlp.linear1": "mlp.dense_h_to_4h", "mlp.linear2": "mlp.dense_4h_to_h",
}


def stage_file(index: int) -> str:
    return f"layer_{index:02d}-model_00-model_states.pt"


def qkv_rows_to_project(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """[3*hidden, ...] rows from NeoX's [H, 3, D] order to this project's [3, H, D]."""
    rest = tensor.shape[1:]
    return tensor.reshape(heads, 3, -1, *rest).transpose(0, 1).reshape(tensor.shape)


def _layer_tensors(state: dict, index: int, file: str, heads: int) -> dict:
    out = {}
    for key, tensor in state.items():
        if key.startswith(POSITIONAL_PREFIXES):
            continue
        module, _, field = key.rpartition(".")
        if module not in LAYER_NAMES or field not in ("weight", "bias"):
            raise CheckpointImportError(
                f"{file} holds {key}, which the importer does not know: it converts GPT-NeoX / KERPLE-fork layers "
                f"with {', '.join(sorted(set(LAYER_NAMES)))} (weight and bias) and a positional module. The run "
                "used a feature this project does not have (e.g. another MLP or norm type).")
        if module == "attention.query_key_value":
            tensor = qkv_rows_to_project(tensor, heads)
        out[f"layers.{index}.{LAYER_NAMES[module]}.{field}"] = tensor
    return out


def _check_positional_keys(method: str, neox_args, stages, files) -> None:
    required, optional, embedding_keys = expected_keys(method, neox_args)
    for layer, file in zip(stages.layers, files["layers"]):
        present = {k for k in layer if k.startswith(POSITIONAL_PREFIXES)}
        _compare_keys(method, present, required, optional, file)
    present = {k for k in stages.embedding if k.startswith("position_embeddings.")}
    _compare_keys(method, present, embedding_keys, set(), files["embedding"])


def _compare_keys(method, present, required, optional, file):
    missing, foreign = sorted(required - present), sorted(present - required - optional)
    if missing or foreign:
        raise CheckpointImportError(
            f"{file} does not hold what pos-emb {method} stores: missing {missing or 'nothing'}, foreign "
            f"{foreign or 'nothing'}. The checkpoint was trained with another positional method (the config "
            "must name the run's own, e.g. from its configs/ folder, or pass --pos-emb).")


def convert(neox_args, stages, model: torch.nn.Module) -> tuple[dict, list]:
    """(this project's state dict for `model`, notes on what is approximate)."""
    method = neox_args.pos_emb
    if method not in SUPPORTED:
        raise CheckpointImportError(
            f"pos-emb {method!r} is not a positional method of GPT-NeoX or the KERPLE fork, so there is no "
            f"checkpoint of it to import. The importer converts: {', '.join(SUPPORTED)} (the fork's rpe = t5, "
            "kerple_power_ap_ = kerple_power, kerple_power_ap_ap = kerple_bias_weight). Name the run's method "
            "with --pos-emb or in its config.")
    heads, num_layers = neox_args.num_attention_heads, neox_args.num_layers
    files = {"embedding": stage_file(0), "layers": [stage_file(i + 2) for i in range(num_layers)],
             "final_norm": stage_file(num_layers + 3), "output": stage_file(num_layers + 4)}
    _check_positional_keys(method, neox_args, stages, files)
    notes = []
    weights = {}
    for key, tensor in stages.embedding.items():
        if key == "word_embeddings.weight":
            weights[key] = tensor
        elif not key.startswith("position_embeddings."):
            raise CheckpointImportError(f"{files['embedding']} holds {key}, which the importer does not know (the "
                                        "embedding stage has word_embeddings and position_embeddings only).")
    for index, (state, file) in enumerate(zip(stages.layers, files["layers"])):
        weights.update(_layer_tensors(state, index, file, heads))
    for field in ("weight", "bias"):
        if f"norm.{field}" in stages.final_norm:
            weights[f"final_layernorm.{field}"] = stages.final_norm[f"norm.{field}"]
    if stages.output is not None and "final_linear.weight" in stages.output:
        weights["output_head.weight"] = stages.output["final_linear.weight"]
    weights.update(convert_positional(method, neox_args, stages, files, notes))
    note = bf16_distance_note(method, stages)
    notes += [note] if note else []
    _check_against_model(weights, model, files)
    return {key: tensor.detach().float().contiguous() for key, tensor in weights.items()}, notes


def _source_of(key: str, files: dict) -> str:
    if key.startswith("layers."):
        return files["layers"][int(key.split(".")[1])]
    if key.startswith("final_layernorm."):
        return files["final_norm"]
    return files["output"] if key.startswith("output_head.") else files["embedding"]


def _check_against_model(weights: dict, model, files) -> None:
    """Every tensor the model has, of its shape, and nothing else: named with the file it came from."""
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    reshaped = [f"{_source_of(k, files)}: {k} is {tuple(weights[k].shape)}, the config's model needs "
                f"{tuple(own[k].shape)}" for k in own if k in weights and weights[k].shape != own[k].shape]
    unexpected = sorted(set(weights) - set(own))
    if reshaped:
        raise CheckpointImportError(
            "tensor shapes do not match the config: " + "; ".join(reshaped) + ". The config does not describe this "
            "checkpoint (check hidden-size, num-attention-heads, intermediate-size, max-position-embeddings and "
            "the vocabulary), or the file is damaged.")
    if missing or unexpected:
        raise CheckpointImportError(
            f"the checkpoint's tensors do not cover the config's model: missing {missing or 'nothing'}, unexpected "
            f"{unexpected or 'nothing'} (e.g. norm bias absent for a layernorm config, or no-weight-tying set "
            "differently). Pass the run's own config.")
