"""A probe grid scored and written as its mode's record (what the `passkey` and `kv-retrieval` modes
return): teacher-forced (answer log-probability and rank) and, unless `probe-greedy` is off, greedy
exact match.

The record's `loss` is the answer's mean per-token negative log-probability (`ppl` its exp), so the
tables read it like any mode; its own fields hold the grid's row for this length: per depth, and per
sample in depth-major order (`probe_logprob[i]` of two runs are the same prompt: paired tests).
Every rank scores the whole grid (it is small); only rank 0 prints."""
import math
import time

import numpy as np

from megatron.probes.common import GridOptions
from .scoring import greedy_exact, teacher_forced


def probe_record(context, grid) -> dict:
    """The record fields of `grid` ([depth][sample] ProbeSamples at context.length, depths
    probe-depths) and the printed accuracy-by-depth line."""
    settings = context.settings
    grid_options = settings.options(GridOptions)
    samples = [s for row in grid for s in row]
    began = time.perf_counter()  # a probe scores without context.losses, which times the other modes' passes
    forced = teacher_forced(context.model, samples, context.vocab_size, settings.micro_batch_size)
    recompute = not all(getattr(pe, "cache_exact", True) for pe in context.network.positional_embeddings())
    exact = (greedy_exact(context.network, samples, context.vocab_size, settings.micro_batch_size, recompute)
             if grid_options.probe_greedy else None)
    context.seconds += time.perf_counter() - began  # the per-length line and the record's `seconds`
    per_token = np.array([-f["logprob"] / len(s.answer) for f, s in zip(forced, samples)])
    n = len(samples)
    loss = float(per_token.mean())

    def by_depth(values):
        return [float(np.mean(values[i * grid_options.probe_samples:(i + 1) * grid_options.probe_samples])) for i in range(len(grid))]

    record = {
        "length": context.length, "mode": context.mode, "loss": loss, "ppl": math.exp(min(loss, 709.0)),
        "tokens": sum(len(s.answer) for s in samples), "chunks": n,
        "stderr": float(per_token.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
        # The shared fields' chunks are the samples, by index (depth-major): the same prompts in every
        # run, so tables pair them as they pair chunks.
        "chunk_starts": list(range(n)), "chunk_losses": per_token.tolist(),
        "probe_depths": list(grid_options.probe_depths), "probe_samples": grid_options.probe_samples,
        "probe_keys": [s.key for s in samples], "probe_distance": [s.distance for s in samples],
        "probe_logprob": [f["logprob"] for f in forced], "probe_rank": [f["rank"] for f in forced],
        "probe_top1": [f["top1"] for f in forced],
        "depth_logprob": by_depth([f["logprob"] for f in forced]),
        "depth_rank": by_depth([f["rank"] for f in forced]),
        "depth_top1": by_depth([float(f["top1"]) for f in forced]),
        "probe_greedy_exact": exact, "depth_accuracy": by_depth([float(c) for c in exact]) if exact else None,
        "greedy_recomputed": bool(recompute and exact is not None),
    }
    if settings.rank == 0:
        shown = record["depth_accuracy"] or record["depth_top1"]
        what = "greedy accuracy" if exact else "teacher-forced top-1"
        cells = "  ".join(f"{d:g}:{a:.2f}" for d, a in zip(grid_options.probe_depths, shown))
        print(f"{context.mode} L={context.length} {what} by depth  {cells}", flush=True)
    return record
