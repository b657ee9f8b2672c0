"""Tokenize documents into NeoX `<prefix>_<key>_document.bin/.idx` with megatron-core's builder.

Worker processes tokenize batches of documents while the main process reads the input and writes
the results in input order, so the output is byte-identical for any number of workers. At most a
few batches per worker are in flight, so memory stays bounded on corpora of any size. The files
are written under temporary names and renamed only when everything succeeded: a failed or
interrupted run never leaves a `.bin/.idx` pair that looks valid.
"""
import concurrent.futures
import contextlib
import multiprocessing
import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

from megatron.run.preflight import folder_problem
from megatron.progress import Progress
from megatron.tokenizer.tokenizer import describe_bytes

from .documents import InputProblems, expand_inputs, read_documents
from .errors import DataError

BATCH_DOCUMENTS = 32
IN_FLIGHT_PER_WORKER = 4


@dataclass
class PreprocessSummary:
    outputs: list
    dtype: str
    documents: int = 0
    tokens: int = 0
    text_bytes: int = 0
    input_bytes: int = 0
    seconds: float = 0.0
    empty_documents: int = 0
    skipped: dict = field(default_factory=dict)
    skipped_examples: list = field(default_factory=list)

    def __str__(self):
        rate = max(self.seconds, 1e-9)
        lines = [f"documents {self.documents:,}   tokens {self.tokens:,}   text {self.text_bytes / 1e6:,.1f} MB "
                 f"(input files {self.input_bytes / 1e6:,.1f} MB)   time {self.seconds:.1f} s",
                 f"throughput {self.documents / rate:,.0f} docs/s   {self.tokens / rate:,.0f} tokens/s   "
                 f"token dtype {self.dtype}"]
        if self.empty_documents:
            lines.append(f"empty documents left out: {self.empty_documents:,}")
        for kind, count in sorted(self.skipped.items()):
            lines.append(f"skipped ({kind}): {count:,}")
        lines += [f"  e.g. {message}" for message in self.skipped_examples]
        lines += [f"wrote {prefix}.bin / .idx" for prefix in self.outputs]
        return "\n".join(lines)


def output_prefix_for(output_prefix: str, key: str) -> str:
    """NeoX's naming: `--output-prefix data/x` with key `text` gives `data/x_text_document`."""
    return f"{output_prefix}_{key}_document"


def token_dtype(tokenizer):
    """uint16 when every id fits (as NeoX and megatron-core choose), else int32."""
    return DType.optimal_dtype(max(tokenizer.vocab_size, tokenizer.eod + 1))


def preprocess(inputs, output_prefix: str, tokenizer, jsonl_keys=("text",), append_eod: bool = False,
               workers: int = 1, skip_bad_input: bool = False, show_progress: bool = True) -> PreprocessSummary:
    """Tokenize every document of `inputs` into one dataset per key; returns the run's summary."""
    if workers < 1:
        raise DataError(f"--workers must be at least 1, got {workers}.")
    problem = folder_problem(os.path.dirname(os.path.abspath(output_prefix)), "--output-prefix's folder")
    if problem:  # found now, not after every document was tokenized
        raise DataError(problem)
    lost = tokenizer.lost_bytes()
    if lost:  # text would silently lose these characters: refused before any token is written
        kept = [b for b in range(256) if b not in lost]
        raise DataError(
            f"the {tokenizer.name} of {tokenizer.vocab_file} cannot encode {len(lost)} of the 256 byte values: its "
            f"vocabulary has no token for {describe_bytes(lost)}" + (f" (it has tokens for {describe_bytes(kept)} only)" if len(kept) <= 16
                                             else "")
            + ", and no unknown token, so every character made of them would be dropped from the data without a "
            "trace. Give the tokenizer's complete vocabulary file (GPT-2's vocab.json has a token for each of the "
            "256 bytes); nothing was written.")
    files = expand_inputs(inputs)
    dtype = token_dtype(tokenizer)
    prefixes = [output_prefix_for(output_prefix, key) for key in jsonl_keys]
    summary = PreprocessSummary(outputs=prefixes, dtype=dtype.__name__,
                                input_bytes=sum(os.path.getsize(f) for f in files))
    problems = InputProblems(skip=skip_bad_input)
    documents = (texts for _, _, texts in read_documents(files, tuple(jsonl_keys), problems))

    os.makedirs(os.path.dirname(os.path.abspath(output_prefix)), exist_ok=True)
    partial = [(prefix + ".bin.partial", prefix + ".idx.partial") for prefix in prefixes]
    builders = [IndexedDatasetBuilder(bin_path, dtype=dtype) for bin_path, _ in partial]
    start = time.perf_counter()
    progress = Progress("tokenizing", unit="docs", show=show_progress)
    try:
        for batch in _tokenized_batches(documents, tokenizer, append_eod, dtype, workers):
            for arrays, text_bytes in batch:
                summary.text_bytes += text_bytes
                for builder, tokens in zip(builders, arrays):
                    if len(tokens) == append_eod:  # no text tokens: leave the document out
                        summary.empty_documents += 1
                        continue
                    builder.add_document(tokens, [len(tokens)])
                    summary.tokens += len(tokens)
                summary.documents += 1
            rate = summary.tokens / max(time.perf_counter() - start, 1e-9)
            progress.update(len(batch), note=f"{rate:,.0f} tokens/s")
        progress.close()
        if summary.documents == 0:
            raise DataError(f"no documents were read from {', '.join(files)}; nothing was written.")
        for builder, (bin_path, idx_path), prefix in zip(builders, partial, prefixes):
            builder.finalize(idx_path)
            os.replace(bin_path, prefix + ".bin")
            os.replace(idx_path, prefix + ".idx")
    except BaseException:
        progress.close(finished=False)
        for builder, paths in zip(builders, partial):
            with contextlib.suppress(OSError):  # a full disk fails the close's flush too: the first error is kept
                builder.data_file.close()
            for path in paths:
                if os.path.exists(path):
                    os.remove(path)
        raise
    summary.seconds = time.perf_counter() - start
    summary.skipped = dict(problems.counts)
    summary.skipped_examples = problems.first_messages
    return summary


# ------------------------------------------------------------------ tokenization (in workers)
_worker_state = {}


def _init_worker(tokenizer, append_eod, dtype):
    _worker_state.update(tokenizer=tokenizer, append_eod=append_eod, dtype=dtype)


def _encode_batch(batch):
    """[(texts per key)] -> [([token array per key], utf-8 bytes of the texts)]."""
    tokenizer, append_eod, dtype = _worker_state["tokenizer"], _worker_state["append_eod"], _worker_state["dtype"]
    encoded = []
    for texts in batch:
        arrays = []
        for text in texts:
            ids = tokenizer.tokenize(text)
            if append_eod:
                ids.append(tokenizer.eod)
            arrays.append(np.asarray(ids, dtype=dtype))
        encoded.append((arrays, sum(len(t.encode("utf-8")) for t in texts)))
    return encoded


def _batches(documents, size):
    batch = []
    for texts in documents:
        batch.append(texts)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _tokenized_batches(documents, tokenizer, append_eod, dtype, workers):
    """Encoded batches in input order; with several workers, a bounded number are in flight."""
    if workers == 1:
        _init_worker(tokenizer, append_eod, dtype)
        yield from map(_encode_batch, _batches(documents, BATCH_DOCUMENTS))
        return
    # forkserver, not fork: the caller may have threads (tokenizers' thread pool, torch, a logger)
    # whose locks a forked child would inherit held, which hung a run here. The server preloads this
    # module once, so each worker starts in milliseconds. The executor (unlike Pool.terminate) shuts
    # down cleanly when a bad input stops the run mid-way.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                                initargs=(tokenizer, append_eod, dtype)) as pool:
        pending = deque()
        try:
            for batch in _batches(documents, BATCH_DOCUMENTS):
                pending.append(pool.submit(_encode_batch, batch))
                if len(pending) >= IN_FLIGHT_PER_WORKER * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
