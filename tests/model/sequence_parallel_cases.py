"""Two gloo ranks compare a tiny model under sequence parallelism (P = 2) with the same model in one process.

`run(rank, world, port, out)` is the body of each spawned rank: for every case it builds the model (the same
seed on both ranks), computes the whole-sequence logits and every parameter's gradient in one process (on each
rank, no communication), then the same with `model.sequence_parallel` set, each rank given its half of every
sequence; the P = 2 gradients are summed over the ranks (what DeepSpeed's engine does over the group). The
loss is a fixed random projection of the logits, so every logit's gradient is a different number. Rank 0
writes {case: [logits error, gradient error, parameters compared]} (or the error's text) to `out` as JSON."""
import json
import os
import traceback

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator

from megatron.run.initialize import skip_shared_memory_comm_op

from megatron.model import GPTModel
from megatron.model.positional_embeddings import available
from megatron.model.sequence_parallel import SequenceParallel
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config

VOCAB, LENGTH, BATCH = 96, 16, 2
BASE = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": LENGTH,
        "max_position_embeddings": LENGTH, "attention_block_size": 4, "train_micro_batch_size_per_gpu": BATCH,
        "fire_init_L": 8.0, "no_weight_tying": True}
# Documents: two packed documents per row, their boundaries inside the shards and across them.
DOCUMENTS = torch.tensor([[0] * 5 + [1] * 11, [0] * 9 + [1] * 7])
ROW_POSITIONS = torch.tensor([list(range(5)) + list(range(11)), list(range(9)) + list(range(7))])


def cases() -> dict[str, tuple[dict, bool]]:
    """name -> (config overrides, packed documents with per-row positions)."""
    found = {name: ({"pos_emb": name}, False) for name in available()}
    found |= {
        "kerple_log/sdpa": ({"pos_emb": "kerple_log", "attention_impl": "sdpa"}, False),
        "alibi/window": ({"pos_emb": "alibi", "attention_window": 6}, False),
        "rotary/documents": ({"pos_emb": "rotary"}, True),
        "kerple_log/documents": ({"pos_emb": "kerple_log"}, True),
        "fox/documents": ({"pos_emb": "fox"}, True),
        "rotary/dynamic_ntk": ({"pos_emb": "rotary", "max_position_embeddings": 8,
                                "rotary_scaling": {"type": "dynamic_ntk", "factor": 2.0}}, False),
        "kerple_log/ssmax": ({"pos_emb": "kerple_log", "attention_temperature": {"type": "ssmax"}}, False),
        "layer-pattern": ({"pos_emb": "rotary", "layer_pattern": [{"pos-emb": "alibi", "attention-window": 5},
                                                                  {"pos-emb": "fox"}]}, False),
        "path/forget-gate": ({"pos_emb": "path", "path_forget_gate": True}, False),
        "kerple_log/sink": ({"pos_emb": "kerple_log", "attention_sink": True}, False),  # a per-head layer value
        "fox/sink": ({"pos_emb": "fox", "attention_sink": True}, True),
    }
    found |= {f"{name}/fp32": ({"pos_emb": name, "dtype": "float32"}, False) for name in available()}
    return found


def build(overrides: dict) -> GPTModel:
    torch.manual_seed(0)
    overrides = dict(overrides)
    dtype = getattr(torch, overrides.pop("dtype", "float64"))
    model = GPTModel(model_config(NeoXArgs.from_dict(BASE | overrides), VOCAB)).to(dtype)
    with torch.no_grad():  # heads differ: move every positional parameter off its (often shared) initial value
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def compare(overrides: dict, documents: bool, rank: int, world: int) -> list[float]:
    model = build(overrides)
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
    extra = {"document_ids": DOCUMENTS, "position_ids": ROW_POSITIONS} if documents else {}

    logits = model(tokens, **extra)
    projection = torch.randn(BATCH, LENGTH, VOCAB, generator=torch.Generator().manual_seed(2)).to(logits.dtype)
    (logits * projection).sum().backward()
    reference = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    model.sequence_parallel = SequenceParallel(dist.group.WORLD)
    mine = slice(rank * LENGTH // world, (rank + 1) * LENGTH // world)
    local = model(tokens[:, mine], **{k: v[:, mine] for k, v in extra.items()})
    (local * projection[:, mine]).sum().backward()
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local.detach().contiguous())
    logits_error = (torch.cat(gathered, dim=1) - logits.detach()).abs().max().item()
    gradient_error = 0.0
    for name, p in model.named_parameters():
        grad = torch.zeros_like(p) if p.grad is None else p.grad
        dist.all_reduce(grad)
        expected = reference.get(name, torch.zeros_like(p))
        # relative to the parameter's largest gradient entry (at least 1): gradients reach 1e5 here
        gradient_error = max(gradient_error, ((grad - expected).abs().max() / expected.abs().max().clamp(min=1)).item())
    return [logits_error, gradient_error, len(reference)]


def run(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    skip_shared_memory_comm_op(get_accelerator())  # the all-to-alls need no JIT-built allreduce op
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)  # DistributedAttention asks DeepSpeed's comm
    results = {}
    try:
        for name, (overrides, documents) in cases().items():
            try:
                results[name] = compare(overrides, documents, rank, world)
            except Exception:  # noqa: BLE001 — reported per case; the other rank fails the same way
                results[name] = traceback.format_exc()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()
