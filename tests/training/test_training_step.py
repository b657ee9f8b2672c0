"""The training step's cost on an accelerator, counted on CPU, and its numbers: host reads and kernel
launches of one real train_step (DeepSpeed engine, as train.py builds it), fp32 weights under bf16
autocast against a float64 AdamW, and the resume of DeepSpeed bf16-engine checkpoints on fp32 weights."""
import collections
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from megatron.checkpoint.checkpointing import CheckpointError, load_checkpoint, save_checkpoint
from megatron.data.random_tokens import random_batches
from megatron.neox_arguments.to_training import step_run
from megatron.tokenizer import build_tokenizer
from megatron.training.loop import setup_model_and_optimizer, train_step
from tests.support.training import tiny_args

VIEWS = {"aten.view", "aten.detach", "aten.t", "aten.slice", "aten.permute", "aten.transpose", "aten._unsafe_view",
         "aten.unbind", "aten.select", "aten.expand", "aten.alias", "aten.as_strided", "aten.split", "aten.unsqueeze",
         "aten.squeeze", "profiler._record_function_enter_new", "profiler._record_function_exit"}  # no kernel runs


class OpCount(TorchDispatchMode):
    """Every aten op dispatched, by phase: `step` once the last micro-batch's backward has returned."""

    def __init__(self):
        super().__init__()
        self.phase = "forward+backward"
        self.ops = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.phase][str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    def host_reads(self) -> int:  # .item(), bool(t), float(t): each waits for the accelerator's queue
        return sum(ops["aten._local_scalar_dense"] for ops in self.ops.values())

    def launches(self, phase) -> int:
        return sum(n for op, n in self.ops[phase].items() if op not in VIEWS)


def _engine(args):
    args.join_process_group()
    tokenizer = build_tokenizer(args.tokenizer_run())
    engine, optimizer = setup_model_and_optimizer(args.training_run(), tokenizer.padded_vocab_size)
    return engine, optimizer, tokenizer.vocab_size


# Budgets of one step of the tiny model (2 layers, 28 parameter tensors, pos-emb none), in ops dispatched
# after the last backward: the gradient norm and clip, the loss/kept-tokens all-reduce and its one copy to
# the host, one fused AdamW per parameter group, zeroing the gradients. Measured 2026-11-28: 24 launches
# (fp32 and bf16) and no host read there; the whole step 2 host reads (the attention plan's two checks of
# its positions in the forward). DeepSpeed's bf16 engine (bf16-weights: bf16) takes 1120 ops and 35 host
# reads (per parameter tensor: an inf/NaN check read on the host, an fp32 copy, a norm, a multiply, a copy
# back); before this step, with torch's unfused AdamW on CPU (it reads each tensor's step count), bf16 took
# 1374 ops and 66 reads, fp32 817 ops and 34 reads. Any loop
# over the parameter tensors adds at least 28 ops to the tail, so its budget is below 24 + 28; on a GPU each
# op is a kernel launch (~5 us) and each host read drains the queue.
STEP_TAIL_BUDGET = 45
HOST_READ_BUDGET = 3  # per step outside log steps (the goal)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_one_step_reads_the_host_rarely_and_launches_no_per_tensor_kernels(precision, stdlib_data, tmp_path,
                                                                            monkeypatch):
    args = tiny_args(stdlib_data, tmp_path, pos_emb="none", precision=precision, train_micro_batch_size_per_gpu=4)
    engine, optimizer, vocab = _engine(args)
    batches = random_batches(args.train_micro_batch_size_per_gpu, args.seq_length, vocab, 0)
    train_step(step_run(args), engine, optimizer, batches, vocab)  # the optimizer's state exists from here on
    count = OpCount()
    backward = engine.backward

    def backward_then_step_phase(loss):  # instrumentation only: the engine's own backward runs
        result = backward(loss)
        count.phase = "step"
        return result

    monkeypatch.setattr(engine, "backward", backward_then_step_phase)
    with count:
        outcome = train_step(step_run(args), engine, optimizer, batches, vocab)
    assert not outcome.skipped and math.isfinite(outcome.loss) and outcome.grad_norm > 0
    print(f"{precision}: host reads {count.host_reads()}, launches forward+backward "
          f"{count.launches('forward+backward')}, after it {count.launches('step')}: {dict(count.ops['step'])}")
    assert count.host_reads() <= HOST_READ_BUDGET
    assert count.ops["step"]["aten._local_scalar_dense"] == 0
    assert count.launches("step") <= STEP_TAIL_BUDGET, dict(count.ops["step"])
    # one fused AdamW kernel per parameter group (weight decay or not), whatever the number of tensors
    assert count.ops["step"]["aten._fused_adamw_"] == len(optimizer.param_groups)
    matmul_dtypes = {p.dtype for p in engine.module.parameters()}
    assert matmul_dtypes == {torch.float32}  # fp32 weights at either precision (bf16-weights: fp32)
    if precision == "bf16":  # and bf16 compute: autocast casts the weights for the matmuls
        assert count.ops["forward+backward"]["aten._to_copy"] >= 2 * args.num_layers


def test_bf16_steps_match_float64_adamw_on_the_same_gradients(stdlib_data, tmp_path):
    """20 steps of fp32 weights under bf16 autocast against torch's AdamW in float64 fed the gradients the
    step used (read at the optimizer's pre-step hook, after clipping). Tolerance: an fp32 AdamW update
    differs from the float64 one by a few fp32 roundings of lr-sized numbers, and the weight itself rounds
    to fp32 (2^-24 relative) each step, so after 20 steps |w - w64| <= 20 * (1e-5 * lr + 2^-23 * |w|)
    (1e-5: the moments' fp32 rounding relative to the update, amplified where v is tiny). bf16 weights
    would round each update to 2^-9 relative: |w| * 2^-9 is over 100 times that bound."""
    args = tiny_args(stdlib_data, tmp_path, pos_emb="none", precision="bf16", train_micro_batch_size_per_gpu=4,
                     weight_decay=0.1, warmup=0.0, **{"optimizer.params.lr": 1e-3})
    engine, optimizer, vocab = _engine(args)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    reference = [p.detach().double().clone().requires_grad_(True) for p in params]
    group_of = [i for i, g in enumerate(optimizer.param_groups) for _ in g["params"]]
    ref_groups = [{"params": [r for r, j in zip(reference, group_of) if j == i]} for i in range(len(optimizer.param_groups))]
    d = optimizer.defaults
    ref_opt = torch.optim.AdamW(ref_groups, lr=d["lr"], betas=d["betas"], eps=d["eps"])
    clipped_norms = []

    depth = [0]  # SkippableStep.step calls AdamW.step: torch runs the hooks around both

    def feed_reference(opt, *_):
        depth[0] += 1
        if depth[0] > 1:
            return
        for i, group in enumerate(opt.param_groups):
            ref_opt.param_groups[i].update(lr=group["lr"], weight_decay=group["weight_decay"])
        for p, r in zip(params, reference):
            r.grad = p.grad.double()
        clipped_norms.append(torch.linalg.vector_norm(torch.stack([r.grad.norm() for r in reference])).item())
        ref_opt.step()

    optimizer.register_step_pre_hook(feed_reference)
    optimizer.register_step_post_hook(lambda *_: depth.__setitem__(0, depth[0] - 1))
    batches = random_batches(args.train_micro_batch_size_per_gpu, args.seq_length, vocab, 0)
    outcomes = [train_step(step_run(args), engine, optimizer, batches, vocab) for _ in range(20)]
    assert len(clipped_norms) == 20 and not any(o.skipped for o in outcomes)
    for outcome, norm in zip(outcomes, clipped_norms):  # one clip over all tensors, to gradient_clipping
        assert norm == pytest.approx(min(outcome.grad_norm, args.gradient_clipping), rel=1e-5)
    assert any(o.grad_norm > args.gradient_clipping for o in outcomes)  # the clip did act
    lr = args.lr
    for p, r in zip(params, reference):
        bound = 20 * (1e-5 * lr + 2 ** -23 * r.detach().abs())
        assert torch.all((p.detach().double() - r.detach()).abs() <= bound)


def test_a_bf16_engine_checkpoint_resumes_on_fp32_weights(stdlib_data, tmp_path):
    """A checkpoint of DeepSpeed's bf16 engine (what bf16 runs wrote before bf16-weights existed) resumes
    on fp32 weights: the weights are its fp32 masters (not their bf16 rounding), Adam's moments its own, and
    the new checkpoint says its weights are fp32."""
    old = tiny_args(stdlib_data, tmp_path, pos_emb="none", precision="bf16", bf16_weights="bf16",
                    train_micro_batch_size_per_gpu=4)
    engine, optimizer, vocab = _engine(old)
    batches = random_batches(old.train_micro_batch_size_per_gpu, old.seq_length, vocab, 0)
    for _ in range(2):
        train_step(step_run(old), engine, optimizer, batches, vocab)
    assert next(engine.module.parameters()).dtype == torch.bfloat16
    save_checkpoint(old.checkpoint_run(), engine, 2, 8)
    masters = [m.detach().clone() for g in engine.optimizer.fp32_groups for m in g]
    moments = [s["exp_avg"].clone() for s in optimizer.state.values()]

    new = tiny_args(stdlib_data, tmp_path, pos_emb="none", precision="bf16", train_micro_batch_size_per_gpu=4)
    engine, optimizer, vocab = _engine(new)
    assert load_checkpoint(new.checkpoint_run(), engine) == (2, 8)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    assert all(p.dtype == torch.float32 and torch.equal(p, m) for p, m in zip(params, masters))
    assert all(torch.equal(optimizer.state[p]["exp_avg"], m) for p, m in zip(params, moments))
    assert engine.lr_scheduler.num_steps == 2
    outcome = train_step(step_run(new), engine, optimizer, batches, vocab)
    assert not outcome.skipped and math.isfinite(outcome.loss)
    folder = save_checkpoint(new.checkpoint_run(), engine, 3, 12)
    from megatron.checkpoint.checkpointing import read_client_state
    assert read_client_state(new.save, folder.name)["weights_dtype"] == "float32"

    back = tiny_args(stdlib_data, tmp_path, pos_emb="none", precision="bf16", bf16_weights="bf16",
                     train_micro_batch_size_per_gpu=4)
    engine, _, _ = _engine(back)
    with pytest.raises(CheckpointError, match=r"was trained with float32 weights and this run keeps bfloat16 "
                                              r"weights: its optimizer state cannot be resumed .* \(precision: fp32, "
                                              r"or bf16 with bf16-weights: fp32\), or load its weights alone"):
        load_checkpoint(back.checkpoint_run(), engine)


@pytest.mark.slow  # inductor compiles C++ for the layer's forward and backward: ~1-2 min on a cold cache
@pytest.mark.parametrize("method", ["none", "kerple_log"])
def test_compiled_layers_match_the_eager_ones(method, stdlib_data, tmp_path):
    """compile-blocks: the same logits and gradients as the eager layers (inductor's C++ backend on CPU),
    to fp32 rounding (fused kernels reorder sums: a few 1e-6 relative), and the same state_dict keys."""
    from megatron.model import GPTModel
    from megatron.model.transformer import compile_layers
    from megatron.neox_arguments.to_model import model_config
    args = tiny_args(stdlib_data, tmp_path, pos_emb=method, num_layers=2, hidden_size=32, num_attention_heads=2,
                     seq_length=32)
    config = model_config(args, 384)
    torch.manual_seed(0)
    eager = GPTModel(config)
    compiled = GPTModel(config)
    compiled.load_state_dict(eager.state_dict())
    compile_layers(compiled.layers)
    assert list(compiled.state_dict()) == list(eager.state_dict())
    tokens = torch.randint(0, 258, (2, 32), generator=torch.Generator().manual_seed(1))
    for model in (eager, compiled):
        model(tokens).float().square().mean().backward()
    torch.testing.assert_close(compiled(tokens), eager(tokens), rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_a_scheduled_step_with_drawn_positions_reads_the_host_no_more_than_a_plain_one(stdlib_data, tmp_path,
                                                                                      monkeypatch):
    """The length schedule's `length/last_position` (the largest position a step trained on) is read with the
    step's one host read, not once per micro-batch: four micro-batches of random positions under a length
    schedule read the host as often as without one, and the value is the largest drawn position."""
    import megatron.training.loop as loop
    from megatron.length_schedule import parse_schedule

    args = tiny_args(stdlib_data, tmp_path, pos_emb="rotary", random_positions=512, gradient_accumulation_steps=4,
                     train_micro_batch_size_per_gpu=2, train_batch_size=8)
    engine, optimizer, vocab = _engine(args)
    batches = random_batches(args.train_micro_batch_size_per_gpu, args.seq_length, vocab, 0)
    length = parse_schedule([{"start-step": 0, "seq-length": args.seq_length // 2}], args.seq_length).at(0)
    drawn, draw = [], loop.draw_positions

    def recorded(*a, **k):  # instrumentation only: the loop's own draw runs
        drawn.append(draw(*a, **k))
        return drawn[-1]

    monkeypatch.setattr(loop, "draw_positions", recorded)
    reads = {}
    for schedule in (None, length):
        train_step(step_run(args), engine, optimizer, batches, vocab, schedule)  # the optimizer's state exists from here on
        drawn.clear()
        with OpCount() as count:
            outcome = train_step(step_run(args), engine, optimizer, batches, vocab, schedule)
        reads[schedule is not None] = count.host_reads()
    assert reads[True] == reads[False], reads
    assert len(drawn) == 4 and outcome.shape["last_position"] == max(int(d.max()) for d in drawn)
    assert outcome.shape["last_position"] >= args.seq_length // 2  # drawn past the fragment's own length
