"""Each positional method's weights and buffers, from the fork's names to this project's.

The fork (and upstream NeoX) keep the positional module inside every layer: KERPLE and T5 are one
module shared by all layers (`attention.rpe`, so every layer file holds a copy), ALiBi slopes and
rotary frequencies are per-layer buffers, learned and sinusoidal sit in the embedding stage. Buffers
this project computes itself (ALiBi slopes, rotary and sinusoidal frequencies) are not imported but
checked against the config, so a checkpoint made with other settings is refused, not mis-scored.
"""
import torch

from megatron.model.positional_embeddings.alibi import alibi_slopes
from .layout import CheckpointImportError

BOUND_MARGIN = 1e-12  # how far inside a clamp bound an imported value is placed (see kerple_raw)
FORK_EPS = 1e-2       # the fork's clamp bound, a constant in its ParallelKerpleLog / ParallelKerplePower

# this project's method -> the fork's `attention.rpe` parameters -> (this project's raw_ name, constraint)
KERPLE = {
    "kerple_log": {"bias_p": ("r1", "multiplier"), "bias_a": ("r2", "multiplier")},     # -p log(1 + a d)
    "kerple_power": {"bias_a": ("r1", "multiplier"), "bias_p": ("r2", "exponent")},     # -a d^p
    "kerple_bias_weight": {"bias_a": ("r1", "multiplier"), "bias_p": ("r2", "exponent"),  # fork's power_ap_ap
                           "wei_a": ("r3", "multiplier"), "wei_p": ("r4", "exponent")},
}
SUPPORTED = ("learned", "sinusoidal", "rotary", "t5", "alibi", "none", *KERPLE)
# keys of a layer file that belong to the positional method (everything else is the transformer layer)
POSITIONAL_PREFIXES = ("attention.rpe.", "attention.alibi_embed.", "attention.rotary_emb.")


def kerple_raw(stored: torch.Tensor, constraint: str, eps: float) -> tuple[torch.Tensor, int]:
    """The fork's stored [H, 1, 1] values -> this project's raw [H] parameter, and how many heads sat on
    a bound.

    The fork clamps in place at every forward (multipliers to >= eps, exponents to [eps, 2]), so the
    value it computed with is clamp(stored); a checkpoint written after an optimizer step may even hold
    values past a bound. This project's eps + softplus(raw) and eps + (2 - eps) sigmoid(raw) never reach
    a bound, so a value on one is placed BOUND_MARGIN inside it: within 2e-12 in float64, and exactly the
    bound in an fp32 forward (eps + 1e-12 rounds to fp32(eps); sigmoid(27.6) rounds to 1)."""
    value = stored.detach().double().reshape(-1)
    if constraint == "multiplier":
        value = value.clamp(min=eps)
        x = (value - eps).clamp(min=BOUND_MARGIN)
        raw = x + torch.log(-torch.expm1(-x))  # softplus^-1
        on_bound = int((value <= eps).sum())
    else:
        value = value.clamp(eps, 2.0)
        fraction = ((value - eps) / (2.0 - eps)).clamp(BOUND_MARGIN, 1.0 - BOUND_MARGIN)
        raw = torch.logit(fraction)
        on_bound = int(((value <= eps) | (value >= 2.0)).sum())
    return raw.float(), on_bound


def check_fixed(name: str, stored: torch.Tensor, expected: torch.Tensor, where: str, fix: str) -> str | None:
    """A buffer this project recomputes: equal in fp32, or within bf16 rounding when stored in bf16
    (returns a note then); anything else means the config does not describe the checkpoint."""
    stored64 = stored.detach().double().reshape(-1)
    if stored64.shape != expected.shape:
        raise CheckpointImportError(
            f"{where}: {name} has {stored64.numel()} values, but the config gives {expected.numel()}. {fix}")
    relative = float(((stored64 - expected).abs() / expected.abs().clamp(min=1e-30)).max())
    if relative <= 1e-6:
        return None
    if stored.dtype == torch.bfloat16 and relative <= 2.0 ** -8:
        return (f"{name} is stored in bf16 (max relative difference {relative:.1e} from the exact values). The "
                "bf16 run computed with those rounded values; this project computes exact ones, so its "
                "logits match the run's only within that rounding.")
    raise CheckpointImportError(
        f"{where}: {name} differs from the values the config implies (max relative difference {relative:.2e}). "
        f"{fix}")


def shared_copy(layers: list, key: str, files: list) -> torch.Tensor:
    """The fork's one shared module, from the copy every layer file holds; the copies must agree."""
    first = layers[0][key]
    for layer, name in zip(layers[1:], files[1:]):
        if key not in layer:
            raise CheckpointImportError(f"{name} lacks {key}, which {files[0]} has: every layer of the fork holds "
                                        "a copy of the one shared positional module. The file is damaged.")
        if not torch.equal(layer[key], first):
            raise CheckpointImportError(
                f"{name} and {files[0]} hold different {key}: the fork shares one positional module across "
                "layers, so the copies must be equal. This checkpoint was not written by that code.")
    return first


def expected_keys(method: str, neox_args) -> tuple[set, set, set]:
    """(required positional keys per layer, optional ones, embedding-stage positional keys)."""
    if method in KERPLE:
        return {f"attention.rpe.{name}" for name in KERPLE[method]}, set(), set()
    return {
        "t5": ({"attention.rpe.weight"}, set(), set()),
        "alibi": ({"attention.alibi_embed.slopes"}, set(), set()),
        # upstream saves inv_freq only with rotary_save_freqs_buffer; the fork always does
        "rotary": (set(), {"attention.rotary_emb.inv_freq"}, set()),
        "learned": (set(), set(), {"position_embeddings.weight"}),
        "sinusoidal": (set(), set(), {"position_embeddings.inv_freq"}),
        "none": (set(), set(), set()),
    }[method]


def convert_positional(method: str, neox_args, stages, files: dict, notes: list) -> dict:
    """This project's `pos_embs.0.*` tensors; buffers it recomputes are checked, not imported."""
    layers, layer_files = stages.layers, files["layers"]
    heads, head_dim = neox_args.num_attention_heads, neox_args.hidden_size // neox_args.num_attention_heads
    out = {}
    if method in KERPLE:
        if abs(neox_args.kerple_eps - FORK_EPS) > 1e-12:
            raise CheckpointImportError(
                f"kerple-eps is {neox_args.kerple_eps}, but the fork clamps at {FORK_EPS}; imported values would "
                f"be re-bounded differently. Remove kerple-eps from the config (its default is {FORK_EPS}).")
        for fork_name, (name, constraint) in KERPLE[method].items():
            stored = shared_copy(layers, f"attention.rpe.{fork_name}", layer_files)
            if stored.numel() != heads:
                raise CheckpointImportError(
                    f"{layer_files[0]}: attention.rpe.{fork_name} has shape {tuple(stored.shape)}, but the config has "
                    f"{heads} heads (the fork stores [heads, 1, 1]). Check num-attention-heads in the config.")
            out[f"pos_embs.0.raw_{name}"], on_bound = kerple_raw(stored, constraint, neox_args.kerple_eps)
            if on_bound:
                notes.append(f"attention.rpe.{fork_name}: {on_bound} of {heads} heads sit on the fork's clamp bound; "
                             f"imported {BOUND_MARGIN:g} inside it (the same value in an fp32 forward).")
    elif method == "t5":
        table = shared_copy(layers, "attention.rpe.weight", layer_files)
        buckets = neox_args.rpe_num_buckets
        if tuple(table.shape) != (buckets, heads):
            raise CheckpointImportError(
                f"{layer_files[0]}: attention.rpe.weight has shape {tuple(table.shape)}, but the config gives "
                f"[rpe-num-buckets, heads] = [{buckets}, {heads}]. Set rpe-num-buckets to the run's value.")
        out["pos_embs.0.table"] = table  # [buckets, H], scaled by sqrt(head_dim) in both forwards
    elif method == "alibi":
        expected = torch.tensor(alibi_slopes(heads), dtype=torch.float64)
        checked = {check_fixed("attention.alibi_embed.slopes", layer["attention.alibi_embed.slopes"], expected, name,
                               "Check num-attention-heads in the config.") for layer, name in zip(layers, layer_files)}
        notes += sorted(note for note in checked if note)
    elif method == "rotary":
        dims = int(head_dim * neox_args.rotary_pct)
        expected = 1.0 / neox_args.rotary_emb_base ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
        checked = {check_fixed("attention.rotary_emb.inv_freq", layer["attention.rotary_emb.inv_freq"], expected,
                               name, "Set rotary-pct and rotary-emb-base to the run's values.")
                   for layer, name in zip(layers, layer_files) if "attention.rotary_emb.inv_freq" in layer}
        notes += sorted(note for note in checked if note)
    elif method == "sinusoidal":
        hidden = neox_args.hidden_size
        expected = 1.0 / 10000 ** (torch.arange(0, hidden, 2, dtype=torch.float64) / hidden)
        note = check_fixed("position_embeddings.inv_freq", stages.embedding["position_embeddings.inv_freq"],
                           expected, files["embedding"], "Check hidden-size in the config.")
        notes += [note] if note else []
        if stages.embedding["position_embeddings.inv_freq"].dtype == torch.bfloat16:
            notes.append("sinusoidal in a bf16 run: the fork also computed the positions in bf16 (every "
                         "position > 256 rounded); this project computes them in fp32.")
    elif method == "learned":
        out["pos_embs.0.embedding.weight"] = stages.embedding["position_embeddings.weight"]
    return out


def bf16_distance_note(method: str, stages) -> str | None:
    """The fork builds distance matrices in the scores' dtype: in bf16 every d > 256 is rounded."""
    sample = next(iter(stages.final_norm.values()))
    if sample.dtype == torch.bfloat16 and method in (*KERPLE, "alibi"):
        return (f"{method} in a bf16 run: the fork computed the distances d in bf16 (every d > 256 rounded to "
                "a multiple of a power of two); this project uses exact float32 distances, so beyond 256 tokens "
                "the imported model is the run's kernel evaluated exactly, not its rounded forward.")
    return None

