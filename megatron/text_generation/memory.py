"""What generation will allocate, checked before it is allocated (as megatron/run/preflight.py checks
evaluate.py's longest length): the KV cache holds every layer's keys and values for every slot of a
batch — `longest prompt + maximum_tokens` slots per row — so a large `maximum_tokens` asks for more
memory than there is, and without this check torch fails deep inside the first forward (or the
kernel kills the process with no message)."""
import torch

from megatron.device_memory import available_bytes

GIB = 2 ** 30


def element_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def kv_cache_bytes(num_layers: int, batch: int, capacity: int, hidden: int, dtype_bytes: int) -> int:
    """megatron/model/kv_cache.py: keys and values [b, H, capacity, D] per layer (H * D = hidden), plus
    each row's positions (int64) and real-token flags (bool)."""
    return 2 * num_layers * batch * capacity * hidden * dtype_bytes + 9 * batch * capacity


def recompute_bytes(batch: int, length: int, hidden: int, vocab: int, dtype_bytes: int) -> int:
    """`recompute`: no cache, a full forward of the whole sequence at each step; at least one hidden
    state and the fp32 logits of the last one (a lower bound, as preflight's)."""
    return batch * length * (hidden * dtype_bytes + 4 * vocab)


def generation_memory_problem(*, num_layers: int, hidden: int, vocab: int, dtype: torch.dtype, batch: int,
                              longest_prompt: int, max_new_tokens: int, recompute: bool, weights_bytes: int = 0,
                              key: str = "maximum_tokens", where: str | None = None) -> str | None:
    """Why generating `max_new_tokens` after `batch` prompts of up to `longest_prompt` tokens cannot fit
    in what the device has free (after `weights_bytes` of weights not loaded yet), or None."""
    size = element_bytes(dtype)
    capacity = longest_prompt + max_new_tokens
    if recompute:
        need = recompute_bytes(batch, capacity, hidden, vocab, size)
        per_token = recompute_bytes(batch, 1, hidden, vocab, size)
        what = (f"a forward of {batch} sequence(s) of {capacity:,} tokens (recompute: one hidden state and the "
                "logits)")
    else:
        need = kv_cache_bytes(num_layers, batch, capacity, hidden, size)
        per_token = kv_cache_bytes(num_layers, batch, 1, hidden, size)
        what = (f"the KV cache (keys and values of {num_layers} layers x {batch} prompt(s) x {capacity:,} tokens "
                f"x {hidden} hidden x {size} bytes)")
    available, kind = available_bytes()
    if weights_bytes + need <= available:
        return None
    fits = max(0, (available - weights_bytes) // per_token - longest_prompt)
    where = f"{where}: " if where else ""
    weights = f" on top of {weights_bytes / GIB:,.2f} GiB of weights" if weights_bytes else ""
    return (f"{where}{key.replace('_', '-')} {max_new_tokens:,} cannot fit: generating it needs at least "
            f"{need / GIB:,.2f} GiB for {what}{weights}, but there are {available / GIB:,.2f} GiB {kind}. Set "
            f"{key.replace('_', '-')} to at most {fits:,} (with prompts of up to {longest_prompt:,} tokens), or "
            "generate fewer prompts at once (generation-batch-size).")
