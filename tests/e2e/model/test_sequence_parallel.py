"""Sequence parallelism (megatron/model/sequence_parallel.py): a model whose sequences are split over two gloo
ranks gives the logits and gradients of the same model in one process, for every positional method."""
import json
import socket

import torch.multiprocessing as mp

from megatron.model.positional_embeddings import available
from tests.model.sequence_parallel_cases import cases, run

FLOAT32_TERMS = {"fox", "fox/documents", "fox/sink", "fire", "layer-pattern"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# two gloo ranks (torch.multiprocessing), every case in float64 and fp32 in one launch: 9-35 s
def test_two_ranks_give_one_process_logits_and_gradients(tmp_path):
    out = tmp_path / "results.json"
    mp.spawn(run, args=(2, free_port(), str(out)), nprocs=2)
    results = json.loads(out.read_text())
    assert set(results) == set(cases()) and set(available()) | {f"{name}/fp32" for name in available()} <= set(results)
    failed = {name: r for name, r in results.items() if isinstance(r, str)}
    assert not failed, "\n".join(f"{name}:\n{text}" for name, text in failed.items())
    for name, (logits_error, gradient_error, compared) in results.items():
        tolerance = 1e-6 if name in FLOAT32_TERMS or name.endswith("/fp32") else 1e-10
        assert logits_error <= tolerance and gradient_error <= tolerance, (name, logits_error, gradient_error)
        assert compared >= 28, (name, compared)  # every parameter of the model got a gradient


