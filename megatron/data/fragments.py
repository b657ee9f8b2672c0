"""A micro-batch of samples split into shorter training sequences (`length-schedule`'s seq-length stages):
[b, S] -> [b * S/L, L] for every per-token tensor, so every token keeps its label and loss-mask entry and the
tokens per batch stay the same. Each fragment is a sequence of its own: its positions start at 0. With
reset-position-ids the document a fragment starts inside restarts at 0 there (its later documents already
start at 0), so positions step by 1 inside each document of each fragment."""
from megatron.data.packed_documents import positions_in_documents


def split_into_fragments(batch: dict, length: int) -> dict:
    """`batch` ({name: [b, S]}) with each sample cut into S/length consecutive sequences of `length` tokens."""
    if not batch:
        return batch
    samples, full = batch["tokens"].shape
    if length == full:
        return batch
    out = {}
    for name, value in batch.items():
        if tuple(value.shape) != (samples, full):
            raise ValueError(f"split_into_fragments: batch entry {name!r} has shape {tuple(value.shape)}, not "
                             f"[samples, tokens] = {(samples, full)}; only per-token entries can be split.")
        out[name] = value.reshape(samples * (full // length), length)
    if "position_ids" in out and "document_ids" in out:  # reset-position-ids: restart the first document
        out["position_ids"] = positions_in_documents(out["document_ids"])
    return out
