"""Packed documents in a training sample: which document each token belongs to, and positions that
restart in each document (`reset-attention-mask`, `reset-position-ids`; Megatron-LM's keys).

A sample packs documents one after another, each ending with EOD; the EOD belongs to the document it
ends, and the token after it starts the next (megatron-core's rule, which tests/data/test_packed_documents.py
checks these ids and positions against). They are computed here from the sample's final tokens
rather than taken from megatron-core: it gives the documents only as an [s, s] mask, and a training
probe (probe_mix.py) replaces a sample's tokens after megatron-core made its positions.
"""
import numpy
import torch


def document_ids(tokens: torch.Tensor, eod: int) -> torch.Tensor:
    """tokens [..., s] -> int64 [..., s]: each token's document, counted from 0 at the row's start (the
    EODs strictly before the token)."""
    ends = (tokens == eod).long()
    return ends.cumsum(dim=-1) - ends


def positions_in_documents(documents: torch.Tensor) -> torch.Tensor:
    """document ids [..., s] -> int64 [..., s]: each token's index in its own document (0 at each start)."""
    index = torch.arange(documents.shape[-1], device=documents.device).expand_as(documents)
    starts = documents.diff(dim=-1, prepend=documents[..., :1] - 1) != 0  # first token of each document
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - first


class WithDocuments(torch.utils.data.Dataset):
    """`dataset`'s items (megatron-core's GPTDataset, or a probe mix of it) with "document_ids" [s] added
    and, with `reset_positions`, their "position_ids" restarting in each document."""

    def __init__(self, dataset, eod: int, reset_positions: bool):
        self.dataset, self.eod, self.reset_positions = dataset, eod, reset_positions

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        item = dict(self.dataset[index])
        item["document_ids"] = document_ids(item["tokens"], self.eod)
        if self.reset_positions:
            item["position_ids"] = positions_in_documents(item["document_ids"])
        return item


def samples_across_documents(dataset) -> tuple[int, int]:
    """(samples whose input tokens come from more than one document, samples) in the sample index of
    `dataset` (megatron-core's GPTDataset; a BlendedDataset, probe mix or WithDocuments around them): what
    document masking changes. Read from the index (each sample's first and last document and offset), not
    from the tokens: a few numpy operations, whatever the number of samples.

    A sample is seq_length + 1 tokens; the last is a label only. So a sample that ends on the first token
    of the next document (end offset 0, one document later) still feeds the model one document."""
    inner = [dataset]
    counts = [0, 0]
    while inner:
        current = inner.pop()
        if hasattr(current, "datasets"):  # BlendedDataset
            inner.extend(current.datasets)
        elif getattr(current, "sample_index", None) is not None or hasattr(current, "path_to_sample_index"):
            index = current.sample_index
            if index is None:  # megatron-core maps it lazily on the first item
                index = numpy.load(current.path_to_sample_index, allow_pickle=False, mmap_mode="r")
            first, last, last_offset = index[:-1, 0], index[1:, 0], index[1:, 1]
            across = (last - first >= 2) | ((last - first == 1) & (last_offset > 0))
            counts[0] += int(across.sum())
            counts[1] += len(across)
        elif hasattr(current, "dataset"):  # WithDocuments, ProbeMix
            inner.append(current.dataset)
        else:
            raise TypeError(f"no sample index in {type(current).__name__}")
    return counts[0], counts[1]
