"""What train.py says about a run before its first step: the run (its name and folder), the model with
every switch that changes what is trained, and -- where document masking is on -- how much of the data
it changes (on a corpus of long documents almost no sample spans two, so masking changes almost nothing;
without the number a user could conclude that masking does not matter). Each line reads the run's
`RunBanner` (run_keys.py)."""
from megatron.evaluation.labels import trained_parts
from megatron.training.run_keys import RunBanner


def run_line(banner: RunBanner) -> str:
    name = f'"{banner.run_name}"' if banner.run_name else "unnamed (no run-name)"
    if banner.run_dir:
        where = f"filed in {banner.run_dir}"
    elif banner.save:
        where = f"checkpoints in {banner.save}"
    else:
        where = "no checkpoints kept (set run-dir or save)"
    return f"run: {name}, {where}"


def method_and_switches(banner: RunBanner) -> str:
    """`kerple_log + layers[alibi/w64, kerple_log] + docmask + window 32`: the method, then the switches that
    change the model (the ones a result's label names), then the training attention window."""
    parts = [banner.pos_emb, *trained_parts(banner.trained)]
    if banner.attention_window:
        parts.append(f"window {banner.attention_window}")
    return " + ".join(parts)


def model_line(banner: RunBanner, parameters: int, zero_stage: int) -> str:
    return (f"model: {parameters:,} parameters, pos-emb {method_and_switches(banner)}, {banner.precision}, "
            f"ZeRO stage {zero_stage}, {banner.world_size} rank(s)")


def masking_line(banner: RunBanner, across: int, samples: int) -> str | None:
    """The document-masking line, given (samples that span a document boundary, samples) of the training
    set; None when masking is off."""
    if not banner.reset_attention_mask:
        return None
    share = across / samples if samples else 0.0
    positions = ", positions restart in each document" if banner.reset_position_ids else ""
    line = (f"document masking on (reset-attention-mask{positions}): {across:,} of {samples:,} training samples "
            f"({share:.1%}) span a document boundary; masking changes only those")
    if share < 0.05:
        line += (f" -- on this data it changes little: documents are long next to seq-length "
                 f"{banner.seq_length}")
    return line
