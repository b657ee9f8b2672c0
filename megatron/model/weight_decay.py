"""Optimizer parameter groups: weight decay on weight matrices only."""
import torch.nn as nn


def get_params_for_weight_decay_optimization(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weight matrices and embeddings; undecayed norms, biases and positional
    parameters (decay would pull kernel parameters such as KERPLE's r1, r2 towards zero, a
    positional prior nobody asked for). Empty groups are dropped."""
    positional = {id(p) for pe in model.positional_embeddings() for p in pe.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        # Norm weights and all biases are the 1-D parameters of the model.
        (no_decay if p.ndim < 2 or id(p) in positional else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
