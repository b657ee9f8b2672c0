"""Readable labels of runs: what a table's column and a figure's legend say about a run without a `run-name`.

`kerple_log + layers[alibi/w64, kerple_log]`, `rotary + yarn ×8`, `kerple_log + dape2(hidden=32) + docpos`:
the method, then what the run was trained with (read from the checkpoint's own config), then what its
evaluation chose per run (rotary-scaling, attention-window). identity.py keeps the short hashed labels
that name result files; these say the same in words, for people.
"""


def value_of(config, key: str):
    """A key of NeoXArgs or of the config dict train.py stores in a checkpoint."""
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _plain(given: dict) -> dict:
    return {str(k).replace("-", "_"): v for k, v in given.items()}


def _settings(given: dict, leave_out=()) -> str:
    rest = {k: v for k, v in _plain(given).items() if k not in leave_out}
    return "(" + ", ".join(f"{k}={v}" for k, v in sorted(rest.items())) + ")" if rest else ""


def _pattern_entry(entry: dict) -> str:
    entry = _plain(entry)
    text = str(entry.get("pos_emb", "run's"))
    if entry.get("attention_window"):
        text += f"/w{entry['attention_window']}"
    return text + _settings(entry, ("pos_emb", "attention_window")).replace(", ", ",")


def trained_parts(trained) -> list[str]:
    """What the run was trained with beyond its method: hybrid layers, attention temperature, DAPE, output gate,
    randomized positions, document masking (the switches identity.switch_labels hashes)."""
    parts = []
    if pattern := value_of(trained, "layer_pattern"):
        parts.append("layers[" + ", ".join(_pattern_entry(e) if isinstance(e, dict) else str(e)
                                           for e in pattern) + "]")
    if temperature := value_of(trained, "attention_temperature"):
        parts.append(str(_plain(temperature).get("type")) + _settings(temperature, ("type",)))
    if dape := value_of(trained, "dape"):
        parts.append(f"dape{_plain(dape).get('version')}" + _settings(dape, ("version",)))
    if gate := value_of(trained, "attention_output_gate"):
        parts.append(f"{gate} gate")
    if value_of(trained, "attention_sink"):
        parts.append("attention sink")
    if fraction := value_of(trained, "rotary_unrotated_fraction"):
        parts.append(f"p-RoPE p={1 - fraction:.4g}")
    if limit := value_of(trained, "random_positions"):
        parts.append(f"random positions <{limit}")
    if target := value_of(trained, "pose_target_length"):
        parts.append(f"PoSE <{target} ({value_of(trained, 'pose_chunks') or 2} chunks)")
    if value_of(trained, "length_schedule"):
        parts.append("length schedule")
    from megatron.model.positional_embeddings import option_labels
    parts += option_labels(value_of(trained, "pos_emb"), lambda key: value_of(trained, key))  # e.g. forget-gate
    if value_of(trained, "reset_attention_mask"):
        parts.append("docpos" if value_of(trained, "reset_position_ids") else "docmask")
    return parts


def evaluated_parts(per_run_options: dict, window) -> list[str]:
    """What the evaluation chose per run: the method's per-run options ({key: value}: `yarn ×8`) and attention-window."""
    parts = []
    for name, value in per_run_options.items():
        if value is None:
            continue
        if isinstance(value, dict) and "type" in value:
            factor = value.get("factor")
            parts.append(str(value["type"]) + (f" ×{factor:g}" if isinstance(factor, (int, float)) else "")
                         + _settings(value, ("type", "factor")))
        else:
            parts.append(f"{name.replace('_', '-')}={value}")
    if window:
        parts.append(f"window {window}")
    return parts


def readable_label(pos_emb: str, trained_parts: list[str], evaluated_parts: list[str],
                   run_name: str | None = None) -> str:
    """The run's name (or its method and training switches), then its per-run evaluation choices."""
    return " + ".join([run_name] if run_name else [pos_emb, *trained_parts]) + "".join(
        f" + {part}" for part in evaluated_parts)
