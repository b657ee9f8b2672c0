"""Sequence parallelism (megatron/model/sequence_parallel.py): a model whose sequences are split over two gloo
ranks gives the logits and gradients of the same model in one process, for every positional method."""
import importlib.util
import pathlib

import torch

from megatron.model.positional_embeddings import ModelShape, available, lookup
from megatron.model.positional_embeddings.dape import Dape
from megatron.model.head_split import sequence_parallel_problem
from megatron.model.sequence_parallel import HeadShard


# Cases computed in float32: the fp32 runs (every method: "<name>/fp32"), and methods whose terms are float32 whatever
# the model's dtype (fox.py's gate, fire.py's MLP input). Summing over ranks in another order shows at float32's
# rounding (2^-24 = 6e-8) there: the gradients differ by up to 4e-7 of their largest entry.
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_a_head_shard_reads_the_tables_of_its_heads():
    shape = ModelShape(num_heads=4, head_dim=8, hidden_size=32)
    pe = lookup("kerple_log")(shape)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(torch.rand_like(p))
    full, _ = pe.distance_tables(10)
    shard = HeadShard(pe, 2, 2)
    torch.testing.assert_close(shard.distance_tables(10)[0], full[2:4], rtol=0, atol=0)
    bias, _ = shard.pairwise(torch.arange(6), torch.arange(6))
    torch.testing.assert_close(bias, pe.pairwise(torch.arange(6), torch.arange(6))[0][2:4], rtol=0, atol=0)
    assert shard.num_heads == 2 and shard.name == "kerple_log"
    full.sum().backward()  # the slice's gradient reaches the method's own parameters
    assert all(p.grad is not None for p in pe.parameters())


def test_dape_is_refused_because_it_mixes_heads():
    shape = ModelShape(num_heads=4, head_dim=8, hidden_size=32, max_positions=16)
    assert all(sequence_parallel_problem(lookup(name)(shape)) is None for name in available())
    problem = sequence_parallel_problem(Dape(lookup("kerple_log")(shape), {"version": 1}))
    assert "reads every head's score" in problem and "sequence-parallel-size to 1" in problem


def test_the_compatibility_table_in_the_docs_is_current():
    spec = importlib.util.spec_from_file_location("table", REPO / "tools/docs/sequence_parallel_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    page = (REPO / tool.PAGE).read_text()
    assert tool.table() in page, "regenerate it: python tools/docs/sequence_parallel_table.py --write"
    assert "| `dape` over any method | refused: " in page
    assert "| `fox` | per-token values from the layer's input" in page
