"""Chunk choice, sliding windows, per-token scoring and the result file, on small real callables; a model's
losses by slices of positions equal to its full logits' cross entropy."""
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from megatron.evaluation.chunks import chunk_starts, sliding_windows
from megatron.evaluation.modes.position import position_fields
from megatron.evaluation.results import ResultFileError, load_result, summarize, write_atomic
from megatron.evaluation.scoring import nonoverlap_losses, sliding_losses, window_losses
from megatron.model import sliced_loss
from megatron.model.sliced_loss import logits_losses

VOCAB = 4


def scorer(logits_of):
    """A model as scoring calls it (tokens, labels, vocab_size -> losses) from a logits function."""
    return lambda inputs, labels, vocab_size=None: logits_losses(logits_of(inputs), labels, vocab_size)


@scorer
def context_revealer(inputs):
    """Logits whose loss tells how many tokens of context the scored position had, whatever the target:
    VOCAB real tokens at logit 0 and one never-targeted extra token at log(p + 1) give
    cross-entropy log(VOCAB + p + 1) at window position p (context p + 1 tokens)."""
    b, s = inputs.shape
    logits = torch.zeros(b, s, VOCAB + 1, dtype=torch.float64)
    logits[..., VOCAB] = torch.log(torch.arange(1, s + 1, dtype=torch.float64))
    return logits


def contexts(losses):
    return np.rint(np.exp(losses.astype(np.float64)) - VOCAB).astype(int)


def test_chunk_starts_tile_the_stream_and_depend_only_on_data_length_and_seed():
    n, length = 1000, 64
    everything = chunk_starts(n, length, None, seed=0)
    np.testing.assert_array_equal(everything, np.arange(15) * 64)  # (1000 - 1) // 64 = 15 chunks
    assert everything[-1] + length + 1 <= n

    picked = chunk_starts(n, length, 5, seed=0)
    np.testing.assert_array_equal(picked, chunk_starts(n, length, 5, seed=0))
    assert len(picked) == 5 and set(picked) <= set(everything) and list(picked) == sorted(picked)
    others = {tuple(chunk_starts(n, length, 5, seed=s)) for s in range(10)}
    assert len(others) > 1  # the seed matters
    np.testing.assert_array_equal(chunk_starts(n, length, 99, seed=3), everything)


def test_chunk_starts_refuse_a_stream_shorter_than_one_chunk():
    with pytest.raises(ValueError, match="has 64 tokens, fewer than length \\+ 1 = 65"):
        chunk_starts(64, 64, None, 0)


@pytest.mark.parametrize("length,stride,start", [(8, 3, 0), (8, 3, 40), (16, 16, 32), (7, 1, 14), (10, 4, 5)])
def test_sliding_windows_score_each_chunk_target_once_within_the_stream(length, stride, start):
    window_starts, first, last = sliding_windows(start, length, stride)
    scored = np.concatenate([s + 1 + np.arange(f, l) for s, f, l in zip(window_starts, first, last)])
    np.testing.assert_array_equal(scored, start + 1 + np.arange(length))  # in order, once each
    assert (window_starts >= 0).all() and (window_starts + length <= start + length).all()
    assert (last - first <= stride).all()


def test_nonoverlap_gives_position_p_exactly_p_plus_one_tokens_of_context():
    stream = np.arange(200) % VOCAB
    starts = chunk_starts(len(stream), 16, None, 0)
    losses = nonoverlap_losses(context_revealer, stream, starts, 16, batch_size=4)
    np.testing.assert_array_equal(contexts(losses), np.tile(np.arange(1, 17), (len(starts), 1)))


@pytest.mark.parametrize("stride", [1, 3, 8, 16])
def test_sliding_gives_every_target_between_length_minus_stride_plus_one_and_length_of_context(stride):
    length = 16
    stream = np.arange(300) % VOCAB
    starts = chunk_starts(len(stream), length, None, 0)
    losses = sliding_losses(context_revealer, stream, starts, length, stride, batch_size=5)
    context = contexts(losses)
    available = starts[:, None] + 1 + np.arange(length)[None, :]  # stream index of each target = its history
    lower = np.minimum(available, length - stride + 1)
    assert (context >= lower).all() and (context <= np.minimum(available, length)).all()
    if stride == 1:  # every target sees all the context the model can take
        np.testing.assert_array_equal(context, np.minimum(available, length))
    if stride == length:  # windows are the chunks themselves
        np.testing.assert_array_equal(losses, nonoverlap_losses(context_revealer, stream, starts, length, 2))


def test_scores_match_a_float64_bigram_reference_and_do_not_depend_on_batch_size():
    torch.manual_seed(0)
    table = torch.randn(VOCAB, VOCAB + 3, dtype=torch.float64)  # 3 padding rows of the output layer
    bigram = scorer(lambda inputs: table[inputs])  # logits of the next token given the current one
    stream = np.random.default_rng(0).integers(0, VOCAB, 500)
    starts = chunk_starts(len(stream), 32, 6, seed=1)
    one = nonoverlap_losses(bigram, stream, starts, 32, batch_size=1, vocab_size=VOCAB)
    np.testing.assert_allclose(one, nonoverlap_losses(bigram, stream, starts, 32, 4, vocab_size=VOCAB), rtol=0, atol=0)
    log_probs = torch.log_softmax(table[:, :VOCAB], -1).numpy()  # padding gets no probability
    reference = np.array([[-log_probs[stream[c + p], stream[c + p + 1]] for p in range(32)] for c in starts])
    np.testing.assert_allclose(one, reference, rtol=1e-6)
    assert (nonoverlap_losses(bigram, stream, starts, 32, 4) > one).all()  # the padded softmax is worse
    # A bigram model ignores longer context, so sliding scores the same targets identically.
    np.testing.assert_allclose(sliding_losses(bigram, stream, starts, 32, 8, 3, vocab_size=VOCAB), one, rtol=1e-6)


def test_summary_statistics_match_numpy_and_scipy():
    losses = np.random.default_rng(1).uniform(1, 3, (7, 10)).astype(np.float32)
    starts = np.arange(7) * 10
    record = {**summarize(losses, 10, "position", starts), **position_fields(losses)}
    chunk_means = losses.astype(np.float64).mean(axis=1)
    assert record["loss"] == pytest.approx(losses.astype(np.float64).mean(), rel=1e-12)
    assert record["ppl"] == pytest.approx(math.exp(record["loss"]))
    assert record["stderr"] == pytest.approx(stats.sem(chunk_means))
    assert (record["tokens"], record["chunks"], record["chunk_starts"]) == (70, 7, list(range(0, 70, 10)))
    np.testing.assert_allclose(record["chunk_losses"], chunk_means)
    np.testing.assert_allclose(record["position_loss"], losses.astype(np.float64).mean(axis=0))
    assert summarize(losses[:1], 10, "nonoverlap", starts[:1])["stderr"] is None


def test_write_atomic_leaves_no_partial_file(tmp_path):
    target = tmp_path / "run.json"
    with pytest.raises(TypeError):
        write_atomic(target, {"bad": object()})
    assert list(tmp_path.iterdir()) == []
    write_atomic(target, {"ok": 1})
    assert json.loads(target.read_text()) == {"ok": 1} and [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_load_result_names_the_file_and_the_problem(tmp_path):
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ResultFileError, match=r"old\.json is not an evaluation result file .* schema is 'something-else'"):
        load_result(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": ')
    with pytest.raises(ResultFileError, match=r"cannot read evaluation result .*broken\.json"):
        load_result(broken)


def test_evaluation_keys_are_checked_before_any_work(tmp_path):
    from megatron.evaluation.driver import evaluate_run
    from megatron.evaluation.run import EvaluationError
    from megatron.neox_arguments import NeoXArgs, NeoXArgsError

    def args(**values):
        return NeoXArgs.from_dict({"num_layers": 1, "hidden_size": 8, "num_attention_heads": 2,
                                   "pos_emb": "alibi", "train_micro_batch_size_per_gpu": 1, "load": str(tmp_path),
                                   **values})

    with pytest.raises(NeoXArgsError, match="eval-stride: must be a positive integer \\(or null for the default\\), got 0"):
        args(eval_stride=0)
    with pytest.raises(NeoXArgsError, match="eval-chunks: must be a positive integer"):
        args(eval_chunks=-2)
    with pytest.raises(NeoXArgsError, match="eval-modes: is empty"):
        args(eval_modes=[])
    with pytest.raises(EvaluationError, match="`load` is not set"):
        evaluate_run(args(load=None).evaluation_run())


def test_a_models_sliced_losses_are_its_full_logits_cross_entropy(monkeypatch):
    """evaluate.py's perplexities are unchanged by the head applied 5 positions at a time."""
    from tests.support.generation import tiny_model
    model = tiny_model("kerple_log")
    windows = torch.randint(0, 300, (2, 17))
    with torch.no_grad():
        logits = model(windows[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits[..., :300].flatten(0, 1), windows[:, 1:].flatten(),
                                                 reduction="none").view(2, 16)
    monkeypatch.setattr(sliced_loss, "LOSS_SLICE", 5)
    with torch.no_grad():
        torch.testing.assert_close(window_losses(model, windows, 300), expected, rtol=1e-5, atol=1e-5)
