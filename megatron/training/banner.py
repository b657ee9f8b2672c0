"""What train.py says about a run before its first step: the run (its name and folder), the model with
every switch that changes what is trained, and -- where document masking is on -- how much of the data
it changes (on a corpus of long documents almost no sample spans two, so masking changes almost nothing;
without the number a user could conclude that masking does not matter)."""
from megatron.evaluation.labels import trained_parts


def run_line(neox_args) -> str:
    name = f'"{neox_args.run_name}"' if neox_args.run_name else "unnamed (no run-name)"
    if neox_args.run_dir:
        where = f"filed in {neox_args.run_dir}"
    elif neox_args.save:
        where = f"checkpoints in {neox_args.save}"
    else:
        where = "no checkpoints kept (set run-dir or save)"
    return f"run: {name}, {where}"


def method_and_switches(neox_args) -> str:
    """`kerple_log + layers[alibi/w64, kerple_log] + docmask + window 32`: the method, then the switches that
    change the model (the ones a result's label names), then the training attention window."""
    parts = [neox_args.pos_emb, *trained_parts(neox_args)]
    if neox_args.attention_window:
        parts.append(f"window {neox_args.attention_window}")
    return " + ".join(parts)


def model_line(neox_args, parameters: int, zero_stage: int) -> str:
    return (f"model: {parameters:,} parameters, pos-emb {method_and_switches(neox_args)}, {neox_args.precision}, "
            f"ZeRO stage {zero_stage}, {neox_args.world_size} rank(s)")


def masking_line(neox_args, across: int, samples: int) -> str | None:
    """The document-masking line, given (samples that span a document boundary, samples) of the training
    set; None when masking is off."""
    if not neox_args.reset_attention_mask:
        return None
    share = across / samples if samples else 0.0
    positions = ", positions restart in each document" if neox_args.reset_position_ids else ""
    line = (f"document masking on (reset-attention-mask{positions}): {across:,} of {samples:,} training samples "
            f"({share:.1%}) span a document boundary; masking changes only those")
    if share < 0.05:
        line += (f" -- on this data it changes little: documents are long next to seq-length "
                 f"{neox_args.seq_length}")
    return line
