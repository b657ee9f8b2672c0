"""Configuration of a GPT-NeoX-style decoder exported by tools/ckpts/convert_to_hf.py; needs only
transformers. `pos_emb` names the positional method (the class positional_method.py imports) and
`pos_emb_options` holds its options under their config names (e.g. kerple_eps, rotary_scaling), as the
method's own `Options` dataclass takes them."""
from transformers import PreTrainedConfig

from .positional_method import METHODS


class NeoXPEConfig(PreTrainedConfig):
    model_type = "neox_pe"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 384
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 256
    norm: str = "layernorm"              # layernorm | rmsnorm
    layer_norm_eps: float = 1e-5
    activation: str = "gelu"             # gelu (exact) | swiglu
    gpt_j_residual: bool = False         # parallel attention + MLP residual
    no_weight_tying: bool = False        # False: the output head is the input embedding
    attention_window: int | None = None  # the run's window (each module's is in positional_modules)
    # The run's method, the first that positional_method.py holds. Importing it also puts the methods' code
    # into this file's identity: transformers maps a config class to one model class per process, so
    # exports of different methods (or of one method's different code) must not share a config class.
    pos_emb: str = next(iter(METHODS))
    pos_emb_per_layer: bool = False      # one positional module per layer
    pos_emb_options: dict | None = None   # the run's method's options (positional_modules has each module's)
    layer_pattern: list | None = None     # hybrid layers as the run gave them, for the record
    attention_output_gate: str | None = None  # gated attention: "head" | "channel", or none
    attention_sink: bool = False          # a learnable sink logit per layer and head
    positional_modules: list | None = None  # [{pos_emb, window, options}] as the decoder builds them
    layer_module: list | None = None      # the positional module of each layer
    # The longest input the model can embed: a `learned` table's rows; None for a relative method, which has no
    # such limit. transformers reads this field to warn past it and to cap a default `max_length`, so it must
    # not hold the run's max-position-embeddings key when that key limits nothing.
    max_position_embeddings: int | None = None
    # The run's max-position-embeddings key, which the methods build from (learned's rows, ssmax's initial scale)
    neox_max_position_embeddings: int | None = None
    train_length: int | None = None      # seq-length the model was trained at (for the record)
    initializer_range: float = 0.02
    use_cache: bool = True
    tie_word_embeddings: bool = False    # the head is tied in the modeling code itself (no_weight_tying)
