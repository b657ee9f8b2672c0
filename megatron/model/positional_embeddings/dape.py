"""`dape`: Data-Adaptive Positional Encoding (Zheng et al., NeurIPS 2024; V2: "DAPE V2: Process Attention
Score as Feature Map for Length Extrapolation", 2025), a wrapper over the run's method, set as
`dape: {version: 1 | 2, hidden: 32, kernel: 3, form: project | authors}` next to `pos-emb` (the base, e.g.
kerple_log):

    logits = A + B + f([A; B])

with A = q_i . k_j / sqrt(D) (times a weight, for a method with one) and B the base method's bias
[H, q, k] (zeros for a method without one, e.g. rotary or none), stacked along the heads into 2H
channels per (i, j), and f
- version 1: an MLP applied to each (i, j) across the heads, Linear(2H -> hidden), LeakyReLU,
  Linear(hidden -> H);
- version 2: the same on the score matrix seen as a feature map: Conv2d(2H -> hidden, 1 x kernel),
  LeakyReLU, Conv2d(hidden -> H, 1 x kernel), both along the key axis with zero padding kernel // 2.
As the authors' code (github.com/chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py: DAPEV1,
DAPEV2 and Kerple_DAPEV2; LeakyReLU of slope 0.01; kernel 3 by default), and, for version 2, with the
entries a query does not see set to 0 *before* the convolution, which their `torch.tril` does for
causality: otherwise key j's output would read the scores of later keys j + 1, j + 2, i.e. future
tokens. Here every invisible entry is zeroed (causality, and also the attention window and cached
padding), so each row reads only its own visible keys: a block of query rows, the full matrix and a
KV-cache step give the same numbers. One departure: the hidden map is zeroed there too before the
second convolution. In their full-matrix forward the first convolution's bias makes the hidden map
LeakyReLU(bias) at future keys, which the second reads near the diagonal, except in the last row,
whose neighbours past the matrix are padding zeros: so a row's logits depended on whether it was the
last of the forward (its length, not its content), and a KV-cache step (always the last row) would
disagree with the full forward. Version 1 mixes nothing across keys. Initialisation: torch's
defaults for Linear and Conv2d, as theirs.

`form: authors` (version 2) is their exact form, for reproducing their numbers: the hidden map is not
zeroed, so row i reads LeakyReLU(conv1) at keys i + 1 .. i + kernel // 2, which exist unless i is among the
forward's last rows (zero padding there). A row's logits then depend on how long the forward pass is (and,
with packed documents, on the next document's first entries: zero features, but not zero hidden), so it
runs only where the forward's whole score matrix is written out at once (the whole_matrix channel: the
`sdpa_written_out` strategy; a KV-cache step, whose queries are the forward's last rows; the exported
decoder). The hidden map is zeroed only at keys before the row's first visible key (left padding, an
earlier packed document, keys past the window), which their full causal matrix never has, so a padded
row scores as that row alone. A KV-cache step computes its rows as the last rows of the forward so far,
which one layer's cached step matches exactly; with more layers a row cached as the last one is not the
last in a later full forward, so the later layers' cached keys and values differ from a recompute:
`cache_exact` is False (the probes decode with `recompute`), as for rotary's dynamic_ntk. With identical weights the two forms' outputs differ on every row but the
last (docs/positional-methods.md gives the size).

A wrapper, like attention-temperature (temperature.py), not a method per base: it adds a score-matrix
edit (base.py's `modify_scores`) to whatever method `pos-emb` is and delegates everything else to it.
"""
import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, quote, softmax_wrapper_problem

EXAMPLE = "dape: {version: 2, hidden: 32, kernel: 3}"
KEYS = ("version", "hidden", "kernel", "form")
FORMS = ("project", "authors")  # version 2's hidden map zeroed past the visible keys (project) or not (authors)


def dape_problem(value) -> str | None:
    """What is wrong with a `dape` value (None: off), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"must be a mapping such as {{version: 1, hidden: 32}}, got {quote(value)}."
    given = {str(k).replace("-", "_"): v for k, v in value.items()}
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        return f"unknown key(s) {quote(unknown)}; it takes {', '.join(KEYS)} (e.g. {EXAMPLE})."
    if given.get("version") not in (1, 2) or isinstance(given.get("version"), bool):
        return f"version is {quote(given.get('version'))}; choose 1 (an MLP per (i, j)) or 2 (a 1 x kernel convolution)."
    for key, default in (("hidden", 32), ("kernel", 3)):
        number = given.get(key, default)
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            return f"{key} must be a positive integer, got {quote(number)}."
    if given.get("kernel", 3) % 2 == 0:
        return f"kernel must be odd (padding kernel // 2 keeps the key axis), got {given['kernel']}."
    if given["version"] == 1 and "kernel" in given:
        return "kernel is version 2's (version 1 mixes no keys); remove it or set version 2."
    if given.get("form", "project") not in FORMS:
        return (f"form is {quote(given.get('form'))}; choose project (version 2's hidden map zeroed past a row's "
                f"visible keys, the default) or authors (the DAPE authors' exact version 2, not zeroed).")
    if given["version"] == 1 and given.get("form", "project") != "project":
        return ("form authors is version 2's (version 1, an MLP per (i, j), is the authors' form already); remove "
                "form or set version 2.")
    return None


class Dape(PositionalEmbedding):
    """`base` with DAPE's learned edit of its score matrix (see the module's text)."""
    channels = frozenset({"score_rewrite", "query_terms"})  # it reads the scores
    mixes_heads = ("dape's learned function f reads every head's score at each query and key and writes every "
                   "head's logit")

    def __init__(self, base: PositionalEmbedding, dape: dict):
        super().__init__(base.shape, base.options)
        if "score_rewrite" in base.channels:
            raise PositionalEmbeddingError(
                f"dape wraps a method's bias, but pos-emb {base.name!r} already rewrites the score matrix itself; "
                "use dape with a bias method (kerple_log, alibi, t5, fire, ...) or with rotary/none.")
        given = {str(k).replace("-", "_"): v for k, v in dape.items()}
        self.base, self.version = base, given["version"]
        self.hidden, self.kernel = given.get("hidden", 32), given.get("kernel", 3)
        self.form = given.get("form", "project")
        self.name, self.max_length = base.name, base.max_length
        self.uses_max_positions = base.uses_max_positions
        # authors' form: a row cached as the last of the forward is not the last later (the module's text)
        self.cache_exact = getattr(base, "cache_exact", True) and self.form == "project"
        # a row of the authors' form reads the hidden map past its own keys: whole_matrix
        self.channels = (self.channels | (base.channels & {"query_scale"})
                         | ({"whole_matrix"} if self.form == "authors" else set()))
        heads = base.num_heads
        if self.version == 1:
            self.dape_in, self.dape_out = nn.Linear(2 * heads, self.hidden), nn.Linear(self.hidden, heads)
        else:
            width = (1, self.kernel)
            self.dape_in = nn.Conv2d(2 * heads, self.hidden, width, padding=(0, self.kernel // 2))
            self.dape_out = nn.Conv2d(self.hidden, heads, width, padding=(0, self.kernel // 2))

    def add_to_embeddings(self, x, positions):
        return self.base.add_to_embeddings(x, positions)

    def rotate_qk(self, q, k, q_positions, k_positions):
        return self.base.rotate_qk(q, k, q_positions, k_positions)

    def query_scale(self, keys_seen):
        return self.base.query_scale(keys_seen)

    def distance_tables(self, length):
        return self.base.distance_tables(length)

    def pairwise(self, q_positions, k_positions):
        return self.base.pairwise(q_positions, k_positions)

    def pairwise_bytes(self, needs_grad):
        return self.base.pairwise_bytes(needs_grad)

    def kernel_parameters(self):
        return self.base.kernel_parameters()

    def modify_scores(self, scores, bias, q, k, q_positions, k_positions, visible):
        dtype = scores.dtype
        bias = torch.zeros_like(scores) if bias is None else bias.to(dtype).expand_as(scores)
        features = torch.cat([scores, bias], dim=1)                              # [b, 2H, q, k]
        params = [p.to(dtype) for p in (self.dape_in.weight, self.dape_in.bias, self.dape_out.weight,
                                        self.dape_out.bias)]
        if self.version == 1:  # per (i, j), across the heads
            hidden = F.leaky_relu(F.linear(features.movedim(1, -1), *params[:2]))
            extra = F.linear(hidden, *params[2:]).movedim(-1, 1)                 # [b, H, q, k]
        else:  # along the key axis, invisible entries (future keys) zeroed first
            features = features.masked_fill(~visible, 0)
            padding = (0, self.kernel // 2)
            hidden = F.leaky_relu(F.conv2d(features, *params[:2], padding=padding))
            # project: each row's own visible keys; authors: from the row's first visible key on, later keys too
            kept = visible if self.form == "project" else visible.int().cummax(dim=-1).values.bool()
            hidden = hidden.masked_fill(~kept, 0)
            extra = F.conv2d(hidden, *params[2:], padding=padding)
        return scores + bias + extra

    def score_bytes(self):
        """Per (query, key) pair and head, fp32: the zero or expanded bias and the 2H features (3 x 4), their
        masked or moved copy (8), the hidden layer before and after its activation (2 x 4 x hidden / H) and
        the output and the two sums (3 x 4)."""
        return 32 + (8 * self.hidden + self.num_heads - 1) // self.num_heads


def daped(base: PositionalEmbedding, dape: dict | None) -> PositionalEmbedding:
    """`base`, or `base` under DAPE when `dape` is given."""
    problem = softmax_wrapper_problem(base, "dape") if dape is not None else None
    if problem:
        raise PositionalEmbeddingError(problem)
    return base if dape is None else Dape(base, dape)
