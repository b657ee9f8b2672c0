"""An independent float64 forward of the KERPLE fork's GPT (chijames/KERPLE, a GPT-NeoX fork), and the
checkpoint files it writes, for testing tools/ckpts/import_neox.py without downloads.

Written from the fork's code, not from this project's model:
- stages (DeepSpeed pipeline layout): 00 EmbeddingPipe (`word_embeddings.weight`, learned
  `position_embeddings.weight`, sinusoidal `position_embeddings.inv_freq`), 02..L+1
  ParallelTransformerLayerPipe, L+3 NormPipe (`norm.*`), L+4 ParallelLinearPipe (`final_linear.weight`,
  no-weight-tying only); tied runs reuse `word_embeddings.weight` for the logits.
- layer: x + attn(LN1(x)), then + mlp(LN2(.)) (gpt-j-residual off); qkv rows [H, 3, D]; mlp gelu (erf).
- attention: scores = q.k / sqrt(D); then `attention.rpe` (T5: table[bucket] * sqrt(D); KERPLE-log
  -p log(1 + a d); KERPLE-power -a d^p; power_ap_ap: scores * exp(-wa d^wp) - a d^p, with p, a, wa, wp
  clamped in place to [0.01, ...] and exponents to <= 2) or ALiBi (-slope * d); masked to -10000; softmax.
- rotary: the first r dims, cos/sin of t * inv_freq over cat(freqs, freqs), q cos + rotate_half(q) sin.
"""
import json
import math

import torch
import torch.nn.functional as F

EPS = 1e-2
SEQ = 16  # the fork checkpoints' training length (`config`)
LENGTHS = (SEQ, 8 * SEQ)  # where imported checkpoints are scored: 1x and 8x the training length
FORK_NAMES = {"t5": "rpe", "kerple_power": "kerple_power_ap_", "kerple_bias_weight": "kerple_power_ap_ap"}


def slopes(heads):  # the fork's AliBi._get_slopes
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(heads).is_integer():
        return power_of_2(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return power_of_2(closest) + slopes(2 * closest)[0::2][: heads - closest]


def make_weights(method, cfg, seed=0):
    """The fork's per-stage state dicts (float32, as an fp32 run saves them), with KERPLE values placed on,
    below and above the clamp bounds."""
    g = torch.Generator().manual_seed(seed)
    hidden, heads, layers, vocab = cfg["hidden"], cfg["heads"], cfg["layers"], cfg["vocab"]
    head_dim = hidden // heads

    def rand(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g) * std + mean).float()

    embedding = {"word_embeddings.weight": rand(vocab, hidden, std=1.0)}
    if method == "learned":
        embedding["position_embeddings.weight"] = rand(cfg["max_positions"], hidden, std=0.5)
    if method == "sinusoidal":
        embedding["position_embeddings.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, hidden, 2).float() / hidden))
    shared = {}
    if method == "kerple_log":
        shared = {"bias_p": torch.tensor([EPS, 0.004, 1.3, 0.6]), "bias_a": torch.tensor([0.3, EPS, 0.9, -0.2])}
    elif method in ("kerple_power", "kerple_bias_weight"):
        shared = {"bias_p": torch.tensor([2.0, 2.6, EPS, 0.7]), "bias_a": torch.tensor([0.05, EPS, 0.4, 0.003])}
        if method == "kerple_bias_weight":
            shared.update(wei_p=torch.tensor([0.5, 2.0, 1.1, EPS]), wei_a=torch.tensor([0.02, 0.2, EPS, 0.5]))
    elif method == "t5":
        shared = {"weight": rand(cfg["buckets"], heads, std=0.3)}
    shared = {k: v.float().reshape(-1, 1, 1) if k != "weight" else v for k, v in shared.items()}
    stages = [embedding]
    for _ in range(layers):
        layer = {
            "input_layernorm.weight": rand(hidden, std=0.1, mean=1.0), "input_layernorm.bias": rand(hidden, std=0.1),
            "attention.query_key_value.weight": rand(3 * hidden, hidden, std=0.6),
            "attention.query_key_value.bias": rand(3 * hidden, std=0.1),
            "attention.dense.weight": rand(hidden, hidden, std=0.2), "attention.dense.bias": rand(hidden, std=0.1),
            "post_attention_layernorm.weight": rand(hidden, std=0.1, mean=1.0),
            "post_attention_layernorm.bias": rand(hidden, std=0.1),
            "mlp.dense_h_to_4h.weight": rand(4 * hidden, hidden, std=0.2), "mlp.dense_h_to_4h.bias": rand(4 * hidden, std=0.1),
            "mlp.dense_4h_to_h.weight": rand(hidden, 4 * hidden, std=0.1), "mlp.dense_4h_to_h.bias": rand(hidden, std=0.1),
        }
        layer.update({f"attention.rpe.{k}": v.clone() for k, v in shared.items()})
        if method == "alibi":
            layer["attention.alibi_embed.slopes"] = torch.tensor(slopes(heads))
        if method == "rotary":
            dims = int(head_dim * cfg["rotary_pct"])
            layer["attention.rotary_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, dims, 2).float() / dims))
        stages.append(layer)
    stages.append({"norm.weight": rand(hidden, std=0.1, mean=1.0), "norm.bias": rand(hidden, std=0.1)})
    if cfg["untied"]:
        stages.append({"final_linear.weight": rand(vocab, hidden, std=0.3)})
    return stages


def write_fork_checkpoint(folder, stages, cfg, method, iteration=7):
    """save/global_stepN/{layer_XX-model_00-model_states.pt, mp_rank_00_model_states.pt, configs/}, save/latest."""
    step = folder / f"global_step{iteration}"
    (step / "configs").mkdir(parents=True)
    layers = cfg["layers"]
    indices = [0] + [i + 2 for i in range(layers)] + [layers + 3] + ([layers + 4] if cfg["untied"] else [])
    for index, state in zip(indices, stages):
        torch.save(state, step / f"layer_{index:02d}-model_00-model_states.pt")
    args = {"num_layers": layers, "hidden_size": cfg["hidden"], "num_attention_heads": cfg["heads"],
            "max_position_embeddings": cfg["max_positions"], "make_vocab_size_divisible_by": 2,
            "padded_vocab_size": cfg["vocab"], "tokenizer_type": "ByteLevelTokenizer", "model_parallel_size": 1}
    torch.save({"module": None, "iteration": iteration, "args": args, "global_steps": iteration},
               step / "mp_rank_00_model_states.pt")
    (step / "configs" / "run.yml").write_text(json.dumps(fork_config(method, cfg), indent=2))
    (folder / "latest").write_text(f"global_step{iteration}")
    return step


def fork_config(method, cfg):
    """The run's config, in the fork's keys and spelling of the method."""
    config = {"num-layers": cfg["layers"], "hidden-size": cfg["hidden"], "num-attention-heads": cfg["heads"],
              "seq-length": cfg["seq"], "max-position-embeddings": cfg["max_positions"], "norm": "layernorm",
              "no-weight-tying": cfg["untied"], "pos-emb": FORK_NAMES.get(method, method),
              "tokenizer-type": "ByteLevelTokenizer", "make-vocab-size-divisible-by": 2, "precision": "fp32",
              "train_micro_batch_size_per_gpu": 1, "hidden-dropout": 0.0, "attention-dropout": 0.0}
    if method == "rotary":
        config["rotary-pct"] = cfg["rotary_pct"]
    if method == "t5":
        config.update({"rpe-num-buckets": cfg["buckets"], "rpe-max-distance": cfg["max_distance"]})
    return config


def _layernorm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b, 1e-5)


def _buckets(n, num_buckets, max_distance):
    # the fork's causal _relative_position_bucket; its float32 log decides the (discrete) bucket
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return torch.where(n < max_exact, n, large)


def forward(stages, method, cfg, tokens):
    """tokens [s] -> logits [s, vocab], float64."""
    st = [{k: v.double() for k, v in s.items()} for s in stages]
    hidden, heads, layers = cfg["hidden"], cfg["heads"], cfg["layers"]
    head_dim, s = hidden // heads, tokens.shape[0]
    t = torch.arange(s, dtype=torch.float64)
    x = st[0]["word_embeddings.weight"][tokens]
    if method == "learned":
        x = x + st[0]["position_embeddings.weight"][:s]
    if method == "sinusoidal":
        angles = t[:, None] * st[0]["position_embeddings.inv_freq"]
        x = x + torch.cat([angles.sin(), angles.cos()], dim=-1)
    diff = torch.tril(t[:, None] - t[None, :])  # d = i - j on and below the diagonal, 0 above
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    for layer in st[1:1 + layers]:
        h = _layernorm(x, layer["input_layernorm.weight"], layer["input_layernorm.bias"])
        mixed = (h @ layer["attention.query_key_value.weight"].T + layer["attention.query_key_value.bias"])
        q, k, v = mixed.view(s, heads, 3 * head_dim).split(head_dim, dim=-1)  # each [s, H, D]
        if method == "rotary":
            inv_freq = layer["attention.rotary_emb.inv_freq"]
            r = 2 * inv_freq.shape[0]
            emb = torch.cat([t[:, None] * inv_freq] * 2, dim=-1)[:, None, :]
            cos, sin = emb.cos(), emb.sin()

            def rotate(z):
                z_rot, z_pass = z[..., :r], z[..., r:]
                half = torch.cat([-z_rot[..., r // 2:], z_rot[..., :r // 2]], dim=-1)
                return torch.cat([z_rot * cos + half * sin, z_pass], dim=-1)
            q, k = rotate(q), rotate(k)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(head_dim)
        rpe = {n.split(".")[-1]: p for n, p in layer.items() if n.startswith("attention.rpe.")}
        if method == "t5":
            bucket = _buckets((t[:, None] - t[None, :]).clamp(min=0).long(), cfg["buckets"], cfg["max_distance"])
            scores = scores + rpe["weight"][bucket].permute(2, 0, 1) * math.sqrt(head_dim)
        elif method == "kerple_log":
            p, a = rpe["bias_p"].clamp(min=EPS), rpe["bias_a"].clamp(min=EPS)
            scores = scores - p * torch.log(1 + a * diff)
        elif method in ("kerple_power", "kerple_bias_weight"):
            p, a = rpe["bias_p"].clamp(EPS, 2), rpe["bias_a"].clamp(min=EPS)
            if method == "kerple_bias_weight":
                wp, wa = rpe["wei_p"].clamp(EPS, 2), rpe["wei_a"].clamp(min=EPS)
                scores = scores * torch.exp(-wa * diff.pow(wp))
            scores = scores - a * diff.pow(p)
        elif method == "alibi":
            scores = scores - layer["attention.alibi_embed.slopes"].view(-1, 1, 1) * diff
        probs = scores.masked_fill(~causal, -10000.0).softmax(dim=-1)
        context = torch.einsum("hij,jhd->ihd", probs, v).reshape(s, hidden)
        x = x + context @ layer["attention.dense.weight"].T + layer["attention.dense.bias"]
        h = _layernorm(x, layer["post_attention_layernorm.weight"], layer["post_attention_layernorm.bias"])
        h = F.gelu(h @ layer["mlp.dense_h_to_4h.weight"].T + layer["mlp.dense_h_to_4h.bias"])
        x = x + h @ layer["mlp.dense_4h_to_h.weight"].T + layer["mlp.dense_4h_to_h.bias"]
    x = _layernorm(x, st[layers + 1]["norm.weight"], st[layers + 1]["norm.bias"])
    head = st[layers + 2]["final_linear.weight"] if cfg["untied"] else st[0]["word_embeddings.weight"]
    return x @ head.T


def config(method):
    return {"layers": 2, "hidden": 32, "heads": 4, "vocab": 258, "seq": SEQ, "max_positions": 8 * SEQ,
            "untied": method not in ("rotary", "learned"),  # both ways of the output layer
            "rotary_pct": 0.5, "buckets": 8, "max_distance": 32}


def fork_checkpoint(root, method, seed=0):
    cfg = config(method)
    stages = make_weights(method, cfg, seed)
    write_fork_checkpoint(root / "fork", stages, cfg, method)
    return cfg, stages
