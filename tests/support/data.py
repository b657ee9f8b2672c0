"""Data helpers shared by the data and probe tests: NeoX .bin/.idx files written by megatron-core's own
builder, documents of counting tokens (a sample's steps show whether it is a true slice of them), the NeoXArgs
of a tiny data pipeline (and its data keys and tokenizer), tools/datasets/prepare_data.py loaded as a module, and
zstandard JSON-lines corpora written and read back."""
import importlib.util
import io
import itertools

import numpy as np
import pytest
import torch
import zstandard
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import build_tokenizer


EOD = 256  # ByteLevelTokenizer's end-of-document id


def counting_documents(count, low, high, seed, eod=True):
    """Documents whose tokens count up within [low, high) (wrapping), each ending with EOD: a sample
    is a true slice of packed documents iff every step inside it is +1 (mod the range) or crosses EOD."""
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(count):
        start, length = rng.integers(low, high), rng.integers(5, 120)
        documents.append([low + (start - low + i) % (high - low) for i in range(length)] + ([EOD] if eod else []))
    return documents


@pytest.fixture
def tool(repo_root):
    spec = importlib.util.spec_from_file_location("prepare_data", repo_root / "tools/datasets/prepare_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_with_megatron_core(prefix, documents, dtype=np.uint16):
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for document in documents:
        builder.add_item(torch.tensor(document))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def make_args(tmp_path, **values):
    base = {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 1, "seq_length": 32,
            "train_micro_batch_size_per_gpu": 4, "train_iters": 10, "eval_iters": 2, "eval_interval": 5,
            "tokenizer_type": "ByteLevelTokenizer", "num_workers": 0, "data_cache_path": str(tmp_path / "cache")}
    world_size = values.pop("world_size", 1)
    return NeoXArgs.from_dict({**base, **values}, world_size=world_size)


def data_of(args) -> tuple:
    """What a run builds its datasets from (training's loop, evaluation's stream): its data keys and tokenizer."""
    return args.data_run(), build_tokenizer(args.tokenizer_run())


def first_lines_of(path, count):
    with open(path, "rb") as fh:
        reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True))
        return list(itertools.islice(reader, count))


def write_zst(path, data: bytes):
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return path
