"""Configuration of a GPT-NeoX-style decoder exported with the `{pos_emb}` positional method.

Written by tools/ckpts/convert_to_hf.py; needs only transformers. `pos_emb_options` holds the
method's options under their config names (e.g. kerple_eps, rpe_num_buckets). Naming the method
here keeps exports of different methods apart in transformers' module cache, which keys a folder's
code by this file's hash."""
from transformers import PreTrainedConfig


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
    attention_window: int | None = None  # mask keys at distance >= window
    pos_emb: str = "none"
    pos_emb_per_layer: bool = False      # one positional module per layer
    pos_emb_options: dict | None = None
    max_position_embeddings: int | None = None  # rows of a `learned` table; informational otherwise
    train_length: int | None = None      # seq-length the model was trained at (for the record)
    initializer_range: float = 0.02
    use_cache: bool = True
    tie_word_embeddings: bool = False    # the head is tied in the modeling code itself (no_weight_tying)
