"""Data: NeoX .bin/.idx datasets on megatron-core, resumable loaders, evaluation token streams."""
from .errors import DataError
from .gpt_datasets import build_evaluation_stream, build_train_valid_test_datasets, samples_per_split
from .indexed import open_indexed_dataset
from .loader import PretrainingBatchSampler, build_data_loader
from .run_keys import DataRun

__all__ = ["DataError", "DataRun", "build_evaluation_stream", "build_train_valid_test_datasets",
           "samples_per_split", "open_indexed_dataset", "PretrainingBatchSampler", "build_data_loader"]
