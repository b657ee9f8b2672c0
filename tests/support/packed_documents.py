"""What the packed-documents tests (tests/data/test_packed_documents.py, in-process, and
tests/e2e/data/test_packed_documents.py, which compiles the flex kernel and trains through train.py) share: two
rows of packed documents, a tiny model of each kind of positional term, and a packed sample's logits beside
those of each of its documents run alone."""
import torch

from megatron.data.packed_documents import document_ids, positions_in_documents
from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer
from tests.support.hf_export import tiny_config

EOD = 0  # the ByteLevelTokenizer's end of document


# Two rows of documents (their lengths, each ending with EOD except a row's last), laid out differently, so
# the rows need masks and positions of their own. 41 tokens: past the blocks of 8 and 2.5x the training length.
ROWS = [[6, 11, 3, 21], [17, 1, 9, 14]]


LENGTH = 41


# One of each kind of term: none; absolute (learned, sinusoidal); q/k transforms (rotary, xpos); distance
# tables (alibi, sandwich); learnable tables (kerple_log, t5); a weight (kerple_bias_weight); terms that depend
# on the query position itself (fire; ssmax's per-query temperature); per-token terms from the hidden states (fox);
# rewrites of the score matrix (cope, dape).
METHODS = {
    "none": {}, "learned": {}, "sinusoidal": {}, "rotary": {"rotary_pct": 1.0}, "xpos": {}, "alibi": {},
    "sandwich": {}, "kerple_log": {}, "t5": {}, "kerple_bias_weight": {}, "fire": {},
    "alibi+ssmax": {"attention_temperature": {"type": "ssmax"}}, "fox": {}, "cope": {},
    "kerple_log+dape2": {"dape": {"version": 2, "hidden": 8}}, "cable": {},
    "rotary+ssmax": {"rotary_pct": 1.0, "attention_temperature": {"type": "ssmax"}},
    "stickbreaking": {}, "path": {"path_forget_gate": True},
}


def packed_rows(seed=0):
    """tokens [2, LENGTH] of the ROWS' documents, their document ids and positions in their documents."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for lengths in ROWS:
        parts = []
        for n, length in enumerate(lengths):
            doc = torch.randint(1, 256, (length,), generator=generator)
            if n < len(lengths) - 1:
                doc[-1] = EOD
            parts.append(doc)
        rows.append(torch.cat(parts))
    tokens = torch.stack(rows)
    assert tokens.shape == (2, LENGTH)
    return tokens


def documents_of(row_tokens):
    """[(start, end)] of each document of one row, by its EODs (written apart from document_ids)."""
    spans, start = [], 0
    for i, token in enumerate(row_tokens.tolist()):
        if token == EOD:
            spans.append((start, i + 1))
            start = i + 1
    if start < len(row_tokens):
        spans.append((start, len(row_tokens)))
    return spans


def model_of(method, **overrides):
    name = method.split("+")[0]
    config = tiny_config(name, attention_block_size=8, max_position_embeddings=4 * LENGTH) | METHODS[method]
    args = NeoXArgs.from_dict(config | overrides)
    torch.manual_seed(0)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    with torch.no_grad():  # positional parameters away from their initial values, as a trained model's are
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
    return model


def alone_and_packed(model, tokens, reset_positions=True):
    """(each document's logits run alone, concatenated per row; the packed sample's logits)."""
    ids = document_ids(tokens, EOD)
    positions = positions_in_documents(ids) if reset_positions else None
    packed = model(tokens, position_ids=positions, document_ids=ids)
    alone = torch.stack([torch.cat([model(row[None, start:end])[0] for start, end in documents_of(row)])
                         for row in tokens])
    return alone, packed
