"""Which tokens of the evaluation stream are scored, and with which context.

A chunk at start `c` is the L + 1 tokens stream[c : c + L + 1]: L inputs and the L targets
stream[c + 1 : c + L + 1]. Chunk starts are multiples of L, so the chunks tile the stream and every
target belongs to exactly one chunk (the non-overlapping protocol). When only `max_chunks` may be
scored, a fixed seed picks them, so every model and every training seed sees the same chunks.
`eval-documents: within` keeps only the chunks that lie inside one document (the default, `cross`, is
the paper's: chunks run across the documents the stream concatenates).
"""
import numpy as np


def chunk_starts(stream_length: int, length: int, max_chunks: int | None, seed: int,
                 within_documents: np.ndarray | None = None) -> np.ndarray:
    """Sorted start offsets of the chunks scored at evaluation length `length`. With `within_documents`
    (the stream's end-of-document mask, eval-documents: within) only the chunks whose L inputs hold no
    end-of-document token are candidates: each lies inside one document (its last target may end it)."""
    available = (stream_length - 1) // length
    if available < 1:
        raise ValueError(
            f"the evaluation stream has {stream_length} tokens, fewer than length + 1 = {length + 1}; "
            "evaluate at a shorter length or on a larger split")
    candidates = np.arange(available, dtype=np.int64)
    if within_documents is not None:
        ends_before = np.concatenate(([0], np.cumsum(within_documents[:available * length])))
        crossing = ends_before[(candidates + 1) * length] - ends_before[candidates * length] > 0
        candidates = candidates[~crossing]
        if not len(candidates):
            raise ValueError(f"no chunk of {length} tokens lies inside one document (eval-documents: within): "
                             "every such chunk crosses an end-of-document token; evaluate at a shorter length, "
                             "on a split with longer documents, or with eval-documents: cross")
    if max_chunks is None or max_chunks >= len(candidates):
        return candidates * length
    # Seeded by (eval seed, length) only: nothing about the model or its training seed enters.
    rng = np.random.default_rng([seed, length])
    picked = np.sort(rng.choice(len(candidates), size=max_chunks, replace=False))
    return candidates[picked] * length


def sliding_windows(start: int, length: int, stride: int):
    """The model inputs that score chunk `start`'s L targets with more context than the chunk has.

    Returns (window_starts, first, last): window w is stream[s : s + L + 1] with s = window_starts[w];
    it scores its target positions first[w] .. last[w] - 1, the `stride` targets that end the window
    (or fewer for the chunk's first window, which starts at the stream's beginning when it must).
    Together the windows score each of the chunk's targets exactly once, with at least L - stride + 1
    tokens of context wherever the stream has them.
    """
    if not 1 <= stride <= length:
        raise ValueError(f"sliding stride must be between 1 and the length {length}, got {stride}")
    # Target t (stream index) is scored by the window whose inputs end at e, for e in steps of stride.
    ends = start + np.minimum(np.arange(1, -(-length // stride) + 1) * stride, length)
    previous_ends = np.concatenate(([start], ends[:-1]))
    window_starts = np.maximum(ends - length, 0)
    # Stream target t sits at window target position t - s - 1; scored targets are previous_end+1 .. end.
    first = previous_ends - window_starts
    last = ends - window_starts
    return window_starts, first, last
