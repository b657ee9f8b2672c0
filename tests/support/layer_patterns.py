"""Layer patterns as the recipes that use them (Llama 4's NoPE layers, Gemma's 5:1 windows, KERPLE and
ALiBi mixed), shared by the layer-pattern tests and the Hugging Face export test."""

W = 6  # the windowed layers' window, below the lengths tested so that it masks


PATTERNS = {
    # Llama 4 / SmolLM3: no positions on every 4th layer, rotary elsewhere
    "nope_every_4th": dict(pos_emb="rotary", num_layers=8,
                           layer_pattern=[{"pos-emb": "rotary"}] * 3 + [{"pos-emb": "none"}]),
    # Gemma: 5 sliding-window layers (rotary base 10k) to 1 global layer (base 1M)
    "gemma_5_to_1": dict(pos_emb="rotary", num_layers=6,
                         layer_pattern=[{"attention-window": W, "rotary-emb-base": 10000}] * 5
                         + [{"rotary-emb-base": 1000000}]),
    # KERPLE-log on global layers, ALiBi on windowed ones
    "kerple_global_alibi_window": dict(pos_emb="kerple_log", num_layers=4,
                                       layer_pattern=[{"pos-emb": "alibi", "attention-window": W},
                                                      {"pos-emb": "kerple_log"}]),
}
