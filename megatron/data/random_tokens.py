"""Batches of random tokens: a training step timed or checked without a corpus (the training benchmark, the GPU
check's training speed, the training-step tests), with the keys the data loader's batches have."""
import torch


def random_batches(micro_batch: int, seq_length: int, vocab_size: int, seed: int):
    """Endless batches of `micro_batch` sequences of `seq_length` tokens drawn uniformly from `vocab_size`, each
    label the next token, every position in the loss; the same seed gives the same batches."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        tokens = torch.randint(0, vocab_size, (micro_batch, seq_length + 1), generator=generator)
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(micro_batch, seq_length)}
