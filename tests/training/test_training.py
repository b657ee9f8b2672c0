"""The training loop on DeepSpeed's engine (CPU, gloo): the tiny profile learns, every positional
method trains, gradient accumulation agrees with one big batch, NaN steps are skipped and stop the run,
and the LR schedule is NeoX's. ZeRO stages and the launch through deepy.py: tests/e2e/training/."""
import math
import re

import pytest
import torch

from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.model.positional_embeddings import available
from megatron.neox_arguments import NeoXArgsError
from megatron.training.optimizer import build_lr_scheduler, build_optimizer
from megatron.training.loop import TrainingError, lm_loss, setup_model_and_optimizer, train_step
from megatron.neox_arguments.to_training import lr_schedule, optimizer_run, step_run
from megatron.tokenizer import build_tokenizer
from tests.support.training import four_step_losses, pretrain, tiny_args


# ------------------------------------------------------------------------------- LR schedule
def neox_annealing_lr(step, lr, warmup_iters, total, style, min_lr):
    """GPT-NeoX's AnnealingLR.get_lr, written out from its definition (float64)."""
    if warmup_iters > 0 and step <= warmup_iters:
        return lr * step / warmup_iters
    progress = (step - warmup_iters) / (total - warmup_iters)
    if style == "linear":
        value = lr * (1 - progress)
    elif style == "cosine":
        value = min_lr + (lr - min_lr) / 2 * (math.cos(math.pi * progress) + 1)
    elif style == "exponential":
        value = lr * math.exp(-0.693 * progress)
    else:
        value = lr
    return max(value, min_lr)


@pytest.mark.parametrize("style", ["constant", "linear", "cosine", "exponential"])
@pytest.mark.parametrize("min_lr", [0.0, 1e-4])
def test_lr_schedule_is_neox(style, min_lr, stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, lr_decay_style=style, min_lr=min_lr, warmup=0.1,
                     train_iters=50, **{"optimizer.params.lr": 1e-3})
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    scheduler = build_lr_scheduler(optimizer_run(args), lr_schedule(args), optimizer)
    for step in range(0, 60):
        # Past the decay NeoX's cosine climbs back up; here it stays at min_lr (megatron-core's choice).
        expected = neox_annealing_lr(min(step, 50) if style == "cosine" else step, 1e-3, 5.0, 50, style, min_lr)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12, abs=1e-15), step
        scheduler.step(1)


def test_lr_schedule_state_resumes(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, lr_decay_style="cosine", train_iters=40)
    first = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    scheduler = build_lr_scheduler(optimizer_run(args), lr_schedule(args), first)
    for _ in range(17):
        scheduler.step(1)
    second = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    build_lr_scheduler(optimizer_run(args), lr_schedule(args), second).load_state_dict(scheduler.state_dict())
    assert second.param_groups[0]["lr"] == first.param_groups[0]["lr"] != args.lr


def test_lr_schedule_rejects_min_lr_above_lr(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, min_lr=1.0)
    with pytest.raises(NeoXArgsError, match="min_lr 1.0 is above the peak learning rate"):
        build_lr_scheduler(optimizer_run(args), lr_schedule(args), torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]))


def test_weight_decay_spares_norms_biases_and_kernel_parameters(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, weight_decay=0.1)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    optimizer = build_optimizer(optimizer_run(args), model)
    build_lr_scheduler(optimizer_run(args), lr_schedule(args), optimizer).step(1)  # the scheduler writes weight_decay into each group
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    kernel = [p for pe in model.positional_embeddings() for p in pe.parameters()]
    assert kernel and all(decay_of[id(p)] == 0.0 for p in kernel)
    for name, p in model.named_parameters():
        expected = 0.0 if p.ndim < 2 or any(p is k for k in kernel) else 0.1
        assert decay_of[id(p)] == expected, name


# ------------------------------------------------------------------------------------ loss
def test_lm_loss_ignores_padded_vocabulary_and_masked_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 12, dtype=torch.float64)
    logits[..., 10:] = 50.0  # padding rows: must not take probability from the real tokens
    labels = torch.randint(0, 10, (2, 5))
    mask = torch.tensor([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.float32)
    log_probs = torch.log_softmax(logits[..., :10], dim=-1)
    per_token = -log_probs.gather(-1, labels[..., None])[..., 0]
    expected = (per_token * mask).sum() / mask.sum()
    assert lm_loss(logits, labels, mask, vocab_size=10).item() == pytest.approx(expected.item(), rel=1e-6)


# ------------------------------------------------------------------------------- training
def test_tiny_profile_learns_the_stdlib(stdlib_data, tmp_path, capsys):
    args = tiny_args(stdlib_data, tmp_path, train_iters=60, log_interval=20, eval_interval=30)
    result = pretrain(args)
    first, last = result.losses[1], sum(result.losses[i] for i in range(51, 61)) / 10
    assert first == pytest.approx(math.log(258), abs=0.3)  # uniform over the byte vocabulary at init
    assert last < first - 1.5
    assert result.valid_loss < first - 1.5 and result.test_loss < first - 1.5
    out = capsys.readouterr().out
    line = re.search(r"step 40/60 \| loss [\d.]+ \| ppl [\d.]+ \| lr [\d.e+-]+ \| grad norm [\d.]+ \| "
                     r"[\d,]+ tokens/s \| elapsed \d+:\d\d:\d\d \| ETA \d+:\d\d:\d\d", out)
    assert line, out
    assert "valid at step 30 (64 tokens per sequence)" in out


@pytest.mark.parametrize("method", available())
def test_every_method_trains(method, stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, pos_emb=method, train_iters=3, log_interval=3,
                     hidden_size=32, num_attention_heads=2, train_micro_batch_size_per_gpu=4)
    result = pretrain(args)
    assert sorted(result.losses) == [1, 2, 3]
    assert all(math.isfinite(v) for v in result.losses.values()) and result.skipped_steps == 0
    assert math.isfinite(result.valid_loss) and math.isfinite(result.test_loss)


def test_gradient_accumulation_matches_one_big_batch(stdlib_data, tmp_path):
    reference = four_step_losses(stdlib_data, tmp_path / "one", train_micro_batch_size_per_gpu=16)
    accumulated = four_step_losses(stdlib_data, tmp_path / "four", train_micro_batch_size_per_gpu=4,
                          gradient_accumulation_steps=4)
    assert list(accumulated.values()) == pytest.approx(list(reference.values()), rel=1e-4)


def test_bf16_trains(stdlib_data, tmp_path):
    losses = four_step_losses(stdlib_data, tmp_path, precision="bf16")
    assert losses[4] < losses[1] and all(math.isfinite(v) for v in losses.values())


# -------------------------------------------------------------------------------- NaN steps
def _engine_and_batches(args):
    args.join_process_group()
    tokenizer = build_tokenizer(args.tokenizer_run())
    engine, optimizer = setup_model_and_optimizer(args.training_run(), tokenizer.padded_vocab_size)
    b, s = args.train_micro_batch_size_per_gpu, args.seq_length
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (b, s + 1), generator=generator)
    batch = {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(b, s)}
    poisoned = {**batch, "loss_mask": torch.full((b, s), float("nan"))}  # a corrupt batch: NaN loss
    return engine, optimizer, tokenizer.vocab_size, batch, poisoned


def _snapshot(engine, optimizer):
    weights = {k: v.detach().clone().float() for k, v in engine.module.state_dict().items()}
    moments = [{k: v.clone() for k, v in s.items()} for s in optimizer.state.values()]
    return weights, moments


@pytest.mark.parametrize("overrides", [{}, {"zero_optimization": {"stage": 2}}, {"precision": "bf16"}],
                         ids=["fp32", "zero2", "bf16"])
def test_nan_loss_step_changes_nothing(overrides, stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, train_micro_batch_size_per_gpu=4, warmup=0.0, **overrides)
    engine, optimizer, vocab, batch, poisoned = _engine_and_batches(args)
    train_step(step_run(args), engine, optimizer, iter([batch]), vocab)  # one real step: moments exist
    lr_steps = engine.lr_scheduler.num_steps
    weights, moments = _snapshot(engine, optimizer)
    outcome = train_step(step_run(args), engine, optimizer, iter([poisoned]), vocab)
    assert outcome.skipped and math.isnan(outcome.loss)
    after_weights, after_moments = _snapshot(engine, optimizer)
    assert all(torch.equal(weights[k], after_weights[k]) for k in weights)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(moments, after_moments) for k in a)
    assert engine.lr_scheduler.num_steps == lr_steps
    outcome = train_step(step_run(args), engine, optimizer, iter([batch]), vocab)
    assert not outcome.skipped and math.isfinite(outcome.loss)
    assert not torch.equal(weights["word_embeddings.weight"], engine.module.word_embeddings.weight.float())


def test_divergence_stops_the_run_and_saves_nothing_after_it(stdlib_data, tmp_path):
    # A learning rate of 1e30 blows the weights up in one step; every later loss is NaN. (The blown-up
    # step-1 weights are refused by a save: tests/hostile/test_hostile_training.py.)
    args = tiny_args(stdlib_data, tmp_path, train_iters=20, warmup=0.0, lr_decay_style="constant",
                     max_consecutive_bad_steps=3, **{"optimizer.params.lr": 1e30})
    with pytest.raises(TrainingError, match=r"stopping at step 4: the last 3 steps had a NaN/inf loss .* "
                                            r"skipped and no checkpoint was saved in"):
        pretrain(args)
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").glob("global_step*"))
