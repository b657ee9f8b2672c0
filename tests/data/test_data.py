"""Training datasets from NeoX .bin/.idx files written by megatron-core's own builder (not by project
code), split wiring, per-split lengths, blends, evaluation streams, clear errors, resumable loaders."""
import os
import threading

import numpy as np
import pytest
import torch
from filelock import FileLock

from megatron.data import (DataError, PretrainingBatchSampler, build_data_loader, build_evaluation_stream,
                           build_train_valid_test_datasets)
from tests.support.data import EOD, counting_documents, data_of, make_args, write_with_megatron_core


def assert_packed_from(sample, low, high):
    stream = torch.cat([sample["tokens"], sample["labels"][-1:]]).tolist()
    assert sample["labels"][:-1].tolist() == stream[1:-1]
    for a, b in zip(stream, stream[1:]):
        if EOD not in (a, b):
            assert low <= a < high and b == low + (a - low + 1) % (high - low)


@pytest.fixture
def split_dataset(tmp_path):
    """100 documents; with split 8,1,1 documents 0-79 (tokens 0-79) train, 80-89 (80-159) validate,
    90-99 (160-239) test."""
    documents = (counting_documents(80, 0, 80, 1) + counting_documents(10, 80, 160, 2)
                 + counting_documents(10, 160, 240, 3))
    return write_with_megatron_core(tmp_path / "corpus_text_document", documents), documents


def test_megatron_core_written_data_gives_split_datasets_of_their_lengths(tmp_path, split_dataset):
    prefix, _ = split_dataset
    args = make_args(tmp_path, data_path=prefix, split="8,1,1", seq_length_val=48)
    train, valid, test = build_train_valid_test_datasets(*data_of(args))
    assert len(train) >= args.train_iters * args.train_batch_size
    assert set(train[0]) == {"tokens", "labels", "loss_mask", "position_ids"}  # no L x L attention mask
    for dataset, length, (low, high) in ((train, 32, (0, 80)), (valid, 48, (80, 160)), (test, 48, (160, 240))):
        for i in range(len(dataset)):
            sample = dataset[i]
            assert sample["tokens"].shape == (length,) and sample["tokens"].dtype == torch.long
            assert sample["loss_mask"].dtype == torch.float32 and bool(sample["loss_mask"].all())
            assert_packed_from(sample, low, high)
    assert os.listdir(tmp_path / "cache")  # sample indices cached


def test_a_job_waits_for_another_building_the_same_sample_index_cache(tmp_path, split_dataset):
    """megatron-core writes its index files in place and takes any complete set of names as a cache hit: a job
    started beside another on the same data (comparing variants) read the other's half-written shuffle index
    ("No data left in file"). It now waits for the other's lock, writes nothing meanwhile, then builds."""
    args = make_args(tmp_path, data_path=split_dataset[0], split="8,1,1")
    built = {}
    worker = threading.Thread(target=lambda: built.update(train=build_train_valid_test_datasets(*data_of(args))[0]))
    with FileLock(f"{tmp_path / 'cache'}.lock"):  # the other job, building
        worker.start()
        worker.join(timeout=3)
        assert worker.is_alive() and not (tmp_path / "cache").exists()
    worker.join(timeout=120)
    assert not worker.is_alive() and len(built["train"]) >= args.train_iters * args.train_batch_size
    assert os.listdir(tmp_path / "cache")


def test_validation_length_defaults_to_the_training_length(tmp_path, split_dataset):
    args = make_args(tmp_path, data_path=split_dataset[0], split="8,1,1")
    train, valid, _ = build_train_valid_test_datasets(*data_of(args))
    assert train[0]["tokens"].shape == valid[0]["tokens"].shape == (32,)


def test_a_split_with_no_weight_is_none(tmp_path, split_dataset):
    args = make_args(tmp_path, data_path=split_dataset[0], split="9,1,0")
    _, valid, test = build_train_valid_test_datasets(*data_of(args))
    assert valid is not None and test is None


def test_per_split_paths_with_weights(tmp_path):
    a = write_with_megatron_core(tmp_path / "a", counting_documents(60, 0, 100, 4))
    b = write_with_megatron_core(tmp_path / "b", counting_documents(60, 100, 200, 5))
    c = write_with_megatron_core(tmp_path / "c", counting_documents(20, 200, 250, 6))
    args = make_args(tmp_path, train_data_paths=[a, b], train_data_weights=[1, 3], valid_data_paths=[c])
    train, valid, test = build_train_valid_test_datasets(*data_of(args))
    assert test is None
    from_b = 0
    for i in range(len(train)):
        tokens = train[i]["tokens"]
        text = tokens[tokens != EOD]
        assert bool((text < 100).all()) or bool((text >= 100).all())  # one source per sample
        from_b += int(text.min() >= 100)
    assert abs(from_b / len(train) - 0.75) < 0.03
    for i in range(len(valid)):
        assert_packed_from(valid[i], 200, 250)


def test_evaluation_stream_is_the_split_documents_in_order(tmp_path, split_dataset):
    prefix, documents = split_dataset
    data, tokenizer = data_of(make_args(tmp_path, data_path=prefix, split="8,1,1"))
    stream = build_evaluation_stream(data, "test", tokenizer)
    assert stream.dtype == np.int64 and stream.tolist() == [t for d in documents[90:] for t in d]
    assert build_evaluation_stream(data, "valid", tokenizer).tolist() == [t for d in documents[80:90] for t in d]

    bare = counting_documents(7, 0, 50, 7, eod=False)  # preprocessed without --append-eod
    data, tokenizer = data_of(make_args(tmp_path, train_data_paths=[write_with_megatron_core(tmp_path / "bare", bare)],
                                        test_data_paths=[write_with_megatron_core(tmp_path / "bare", bare)]))
    assert build_evaluation_stream(data, "test", tokenizer).tolist() == [t for d in bare for t in d + [EOD]]
    with pytest.raises(DataError, match="unknown split 'dev'"):
        build_evaluation_stream(data, "dev", tokenizer)
    with pytest.raises(DataError, match="no valid data: set data-path"):
        build_evaluation_stream(data, "valid", tokenizer)
    data, tokenizer = data_of(make_args(tmp_path, data_path=prefix, split="9,1,0"))
    with pytest.raises(DataError, match="gives the test split no weight"):
        build_evaluation_stream(data, "test", tokenizer)


def test_broken_dataset_files_give_clear_errors(tmp_path, split_dataset):
    prefix, documents = split_dataset
    args = make_args(tmp_path, data_path=str(tmp_path / "nope_text_document"))
    with pytest.raises(DataError, match=r"nope_text_document.bin and .*nope_text_document.idx not found"):
        build_train_valid_test_datasets(*data_of(args))

    other = write_with_megatron_core(tmp_path / "other", documents[:50])
    os.replace(other + ".bin", prefix + ".bin")  # a .bin from another run
    args = make_args(tmp_path, data_path=prefix, split="8,1,1")
    with pytest.raises(DataError, match="the two files disagree"):
        build_train_valid_test_datasets(*data_of(args))

    write_with_megatron_core(tmp_path / "corpus_text_document", documents)
    with open(prefix + ".bin", "r+b") as fh:
        fh.truncate(os.path.getsize(prefix + ".bin") - 10)
    with pytest.raises(DataError, match="has .* bytes but .* describes"):
        build_train_valid_test_datasets(*data_of(args))

    for cut in (20, os.path.getsize(prefix + ".idx") - 8):
        write_with_megatron_core(tmp_path / "corpus_text_document", documents)
        with open(prefix + ".idx", "r+b") as fh:
            fh.truncate(cut)
        with pytest.raises(DataError, match="is not a valid megatron/NeoX index"):
            build_train_valid_test_datasets(*data_of(args))


def test_mismatched_tokenizer_and_bad_settings_give_clear_errors(tmp_path, split_dataset):
    prefix, _ = split_dataset
    gpt2_like = write_with_megatron_core(tmp_path / "gpt2", [[15496, 995, 50256]] * 20)
    with pytest.raises(DataError, match="holds token id 50256.*different tokenizer"):
        build_train_valid_test_datasets(*data_of(make_args(tmp_path, data_path=gpt2_like, split="1,0,0")))
    with pytest.raises(DataError, match="gives the valid split no documents"):
        build_train_valid_test_datasets(*data_of(make_args(tmp_path, data_path=prefix, split="999,1,0")))
    with pytest.raises(DataError, match="both data-path and"):
        build_train_valid_test_datasets(*data_of(make_args(tmp_path, data_path=prefix, train_data_paths=[prefix])))
    with pytest.raises(DataError, match="one positive weight per path"):
        build_train_valid_test_datasets(*data_of(make_args(tmp_path, train_data_paths=[prefix, prefix],
                                                           train_data_weights=[1, -2])))
    with pytest.raises(DataError, match="no training data"):
        build_train_valid_test_datasets(*data_of(make_args(tmp_path)))


def batches(loader, count):
    iterator = iter(loader)
    return [next(iterator) for _ in range(count)]


def test_loader_resumes_at_the_consumed_sample_and_shards_over_ranks(tmp_path, split_dataset):
    args = make_args(tmp_path, data_path=split_dataset[0], split="8,1,1", train_micro_batch_size_per_gpu=2)
    train, _, _ = build_train_valid_test_datasets(*data_of(args))
    run = batches(build_data_loader(train, args.data_run(), consumed_samples=0), 6)
    for k, batch in enumerate(run):
        assert torch.equal(batch["tokens"], torch.stack([train[2 * k]["tokens"], train[2 * k + 1]["tokens"]]))
    resumed = batches(build_data_loader(train, args.data_run(), consumed_samples=3 * 2), 3)
    for a, b in zip(run[3:], resumed):
        assert all(torch.equal(a[key], b[key]) for key in a)

    ranks = []
    for rank in (0, 1):
        dp_args = make_args(tmp_path, data_path=split_dataset[0], split="8,1,1", train_micro_batch_size_per_gpu=2,
                            world_size=2)
        dp_args.rank = rank
        ranks.append(batches(build_data_loader(train, dp_args.data_run(), consumed_samples=4), 2))
    for k in range(2):  # global step k after one consumed step of 4 samples: rank r takes 2 of the 4
        together = torch.cat([ranks[0][k]["tokens"], ranks[1][k]["tokens"]])
        assert torch.equal(together, torch.stack([train[4 + 4 * k + i]["tokens"] for i in range(4)]))

    workers_args = make_args(tmp_path, data_path=split_dataset[0], split="8,1,1", train_micro_batch_size_per_gpu=2,
                             num_workers=2)
    with_workers = batches(build_data_loader(train, workers_args.data_run(), consumed_samples=0), 6)
    assert all(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(run, with_workers))


def test_sampler_wraps_around_past_the_end_without_stopping():
    sampler = iter(PretrainingBatchSampler(dataset_size=5, consumed_samples=4, micro_batch_size=2,
                                           data_parallel_rank=0, data_parallel_size=1))
    assert [next(sampler) for _ in range(3)] == [[4, 0], [1, 2], [3, 4]]
