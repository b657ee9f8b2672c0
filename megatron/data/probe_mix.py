"""Mixing a retrieval probe into training (`probe-train-task`, `probe-train-fraction`), so a probe can
ask whether a skill learned at the training length carries to longer ones: tiny models do not
retrieve zero-shot.

Training sample i is replaced, with probability probe-train-fraction, by one probe sample of the same
length made by the evaluation mode's own generator (megatron/probes), its filler taken from
sample i's own tokens (training never sees evaluation text), its depth uniform in [0, 1]. Whether,
where and which key all come from rng(seed, 0, i): deterministic by index, so a run resumed by
consumed samples sees exactly the samples an uninterrupted one would. An evaluation prompt's seed is
(eval-seed, length, depth index, sample index) with a length >= 1, so the 0 in second place keeps
every training draw apart from every evaluation prompt's.
"""
import numpy as np
import torch

from megatron.probes import TrainOptions, generator
from megatron.probes.common import ProbeError, shortest_length
from megatron.probes.kv_retrieval import DEFAULT_PAIRS

KEY_DRAWS = 10  # keys/values drawn for one training sample before its text is called unusable


def probe_options(probe: TrainOptions) -> dict:
    """The generator's options in training, from the training keys only: what is trained must not
    depend on an evaluation key (config_hash leaves those out), so evaluating with probe-kv-pairs: 5
    asks whether retrieval among the trained number of pairs carries to 5."""
    if probe.probe_train_task == "kv-retrieval":
        pairs = probe.probe_train_kv_pairs
        return {"pairs": DEFAULT_PAIRS if pairs is None else pairs}
    return {}


def check_fits(task: str, options: dict, seq_length: int, tokenizer) -> None:
    """The start-up error of a task whose needle, question and answer do not fit one training sample."""
    fixed = generator(task).fixed_tokens(tokenizer, **options)
    if seq_length < shortest_length(fixed):
        raise ProbeError(
            f"probe-train-task: {task} does not fit a training sample: its needle(s), question and answer take "
            f"{fixed} tokens, so seq-length must be at least {shortest_length(fixed)} (a sample is seq-length + 1 "
            f"tokens), but it is {seq_length}. Raise seq-length, or choose another probe-train-task"
            + (" (kv-retrieval fits 64 tokens)." if task == "passkey" else "."))


class ProbeMix(torch.utils.data.Dataset):
    """`dataset` (items of "tokens", "labels", "loss_mask", "position_ids", ...: megatron-core's
    GPTDataset) with a `fraction` of its items replaced by `task` probe samples of the same shapes.
    The task must fit seq_length: gpt_datasets.py checks it (check_fits) before building any split."""

    def __init__(self, dataset, task: str, options: dict, fraction: float, seed: int, seq_length: int, tokenizer):
        self.dataset, self.task, self.options, self.fraction, self.seed = dataset, task, options, fraction, seed
        self.seq_length, self.tokenizer = seq_length, tokenizer
        self.make_sample = generator(task).make_sample

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        item = self.dataset[index]
        draw = np.random.default_rng([self.seed, 0, index])
        if draw.random() >= self.fraction:
            return item
        depth = float(draw.random())
        text = torch.cat([item["tokens"], item["labels"][-1:]])  # the sample's seq_length + 1 tokens
        # (seed, 0, index, k): the key's generator, apart from `draw` (numpy reads a trailing 0 as absent).
        # A sample's own text is short, so it may hold a drawn key or value at every filler offset (a table
        # of numbers); the next k draws other ones rather than ending the run.
        for attempt in range(1, KEY_DRAWS + 1):
            try:
                sample = self.make_sample(text.numpy(), self.tokenizer, self.seq_length, depth,
                                          (self.seed, 0, index, attempt), **self.options)
                break
            except ProbeError as err:
                problem = err
        else:
            raise ProbeError(f"probe-train-task: training sample {index} cannot hold a {self.task} probe with any "
                             f"of {KEY_DRAWS} key draws: {problem}")
        tokens = torch.tensor(sample.tokens, dtype=text.dtype)
        # As GPTDataset: inputs and targets are one sequence shifted by one; the loss is on every token.
        return {**item, "tokens": tokens[:-1].contiguous(), "labels": tokens[1:].contiguous(),
                "loss_mask": torch.ones_like(item["loss_mask"])}
