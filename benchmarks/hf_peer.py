"""The peer every benchmark row is compared with: Hugging Face `GPTNeoXForCausalLM`.

It is what a user would pick instead of this project for a rotary model, so it is built at the same
shape as the run's rows (layers, hidden, heads, 4x MLP, parallel residual or not, vocabulary, rotary
fraction) and run in the same process and the same alternating rounds: for training (build_peer) at
the run's sequence and micro-batch, with torch's AdamW at the run's learning rate, clipped like
train.py, on the same kind of random tokens; for evaluation (build_peer_forward) one sequence per
forward without autograd, as evaluate.py scores."""
import torch

PEER = "HF GPT-NeoX (peer)"


def build_peer_model(args, vocab_size: int, rotary_pct: float = 1.0, max_length: int = 0):
    """HF GPT-NeoX at the shape of `args` (a NeoXArgs), able to embed `max_length` positions."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
        num_attention_heads=args.num_attention_heads, intermediate_size=4 * args.hidden_size,
        max_position_embeddings=max(args.seq_length, 2048, max_length), rotary_pct=rotary_pct,
        use_parallel_residual=args.gpt_j_residual, tie_word_embeddings=not args.no_weight_tying,
        attention_dropout=0.0, hidden_dropout=0.0, attn_implementation="sdpa")
    torch.manual_seed(args.seed)
    return GPTNeoXForCausalLM(config)


def build_peer(args, vocab_size: int, rotary_pct: float = 1.0):
    """(training step function, parameter count) for HF GPT-NeoX at the shape of `args`."""
    model = build_peer_model(args, vocab_size, rotary_pct).train()
    lr = args.optimizer["params"]["lr"] if args.optimizer else 1e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=args.weight_decay)
    generator = torch.Generator().manual_seed(args.seed)
    b, s = args.train_micro_batch_size_per_gpu, args.seq_length
    clip = args.gradient_clipping

    def step():
        for _ in range(args.gradient_accumulation_steps):
            tokens = torch.randint(0, vocab_size, (b, s), generator=generator)
            loss = model(input_ids=tokens, labels=tokens).loss / args.gradient_accumulation_steps
            loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, sum(p.numel() for p in model.parameters())


def build_peer_forward(args, vocab_size: int, rotary_pct: float, max_length: int, device, dtype):
    """forward(tokens [1, L]) -> logits, HF GPT-NeoX in eval mode on `device` in `dtype`."""
    model = build_peer_model(args, vocab_size, rotary_pct, max_length).to(device=device, dtype=dtype).eval()
    return lambda tokens: model(input_ids=tokens).logits
