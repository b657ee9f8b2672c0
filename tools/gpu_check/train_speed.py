"""Part 2 of the GPU check: seconds per training step of every method, and of Hugging Face's GPT-NeoX.

    python -m tools.gpu_check.train_speed --json OUT.json [--profile 162M|tiny] [--budget SECONDS]

Each configuration is a DeepSpeed engine built as train.py builds it, running the real train_step()
(forward, backward, clipping, optimizer) on random tokens (megatron/data/random_tokens.py).
Configurations take turns for several rounds, so drift on the machine spreads over all of them; a
configuration's figure is its median round. Besides `attention-impl: auto` (what a user gets), the
distance-only methods also run with `flex` on CUDA, and the distance-table methods (KERNEL_METHODS) with
`triton` (the flash kernel with the table inside) and, for a learnable table, `sdpa` on CUDA (SDPA and the
table gradient's side pass, what `auto` took there before `triton`) and `sdpa_mask_gradient` (SDPA returning
the mask's gradient itself): the numbers `auto`'s rule for training a learnable table on CUDA
(choice.py, TRITON_FOR_LEARNABLE_TABLES_ON_CUDA) is to be read against, goal within 1.05x of `none`. On the
CPU rehearsal `triton` runs only in Triton's interpreter, when TRITON_INTERPRET=1 is set (about 30 s a step
at the tiny profile), and only for a learnable table. The peer is transformers' GPTNeoXForCausalLM (rotary) of the same size, trained the way its
users do: fp32 weights under bf16 autocast, torch's fused AdamW, the same clipping. On the 162M
profile the gpu-mini sweep's model (configs/reproduce/gpu-mini.yml) is timed too, to project that
sweep's GPU time. Configurations are built in order of value (configurations()) until half the budget is
spent, and rounds stop early when the budget runs out; the JSON says how many ran. A configuration that fails
(out of memory among the others, say) says why in its row, and the others go on.
"""
import argparse
import gc
import json
import statistics
import time
import traceback

import torch

from megatron.data.random_tokens import random_batches
from megatron.model.positional_embeddings import available
from megatron.neox_arguments.to_model import positional_embedding
from megatron.training.loop import AFTER_BACKWARD, lm_loss, setup_model_and_optimizer, train_step
from megatron.model.attention.triton_flash import interpreting
from .profiles import GPU_MINI_SWEEP, KERNEL_METHODS, LEARNABLE_TABLE_METHODS, TABLE4_METHODS, describe, model_args

PEER = "hf_gpt_neox"


# The training step's variants, for the methods of STEP_VARIANT_METHODS: DeepSpeed's bf16 engine (bf16 weights,
# the step before fp32 weights under autocast: `bf16-weights: bf16`) and the compiled layers (`compile-blocks`);
# on a profile that is not bf16 (tiny), the new step in bf16 as well, what the old step compares with.
STEP_VARIANT_METHODS = ("none", "rotary", "kerple_log")
VARIANTS = {"old-step": {"precision": "bf16", "bf16_weights": "bf16"}, "compiled": {"compile_blocks": True}}
# attention-sink's cost on a method with a distance table (its Triton path adds the sink to the kernel's
# log-sum-exp), for the methods of SINK_METHODS: at `auto`, and with `triton` where that kernel runs.
SINK_METHODS = ("kerple_log",)
# The loss head `auto` does not take on this device (`loss-head`: sliced on CPU, full logits when training on
# CUDA), for `none` alone (the head costs the same under every method): the number auto's rule is read against.
OTHER_HEAD = {"cuda": ("sliced-head", {"loss_head": "sliced"}), "cpu": ("full-head", {"loss_head": "full"})}
# Training at a long length, the same tokens per step as the profile (162M: 512 x 32 = 8,192 x 2), for `none` and
# the learnable distance tables at `auto`: where attention, not the rest of the step, sets the cost. Labelled
# METHOD@LENGTH; their ratios are to none@LENGTH.
LONG = {"162M": {"seq_length": 8192, "train_micro_batch_size_per_gpu": 2},
        "tiny": {"seq_length": 256, "train_micro_batch_size_per_gpu": 1}}
LONG_METHODS = ("none", "kerple_log", "kerple_power", "t5")
# One torch.profiler summary each, after the timed rounds: the new step (in bf16: on the tiny profile its +bf16
# row) and the old one.
PROFILED = ("none", "none+bf16", "none+old-step")


class OurStep:
    """One method's engine, stepping on its own stream of random batches."""

    def __init__(self, profile, method, impl, device, overrides=None):
        self.args, self.vocab, padded_vocab = model_args(profile, method, attention_impl=impl, **(overrides or {}))
        self.args.join_process_group()
        run = self.args.training_run()
        self.engine, self.optimizer = setup_model_and_optimizer(run, padded_vocab)
        self.step = run.step
        self.batches = random_batches(self.args.train_micro_batch_size_per_gpu, self.args.seq_length, self.vocab,
                                      self.args.seed)

    def __call__(self):
        return train_step(self.step, self.engine, self.optimizer, self.batches, self.vocab).loss


class PeerStep:
    """transformers' GPTNeoXForCausalLM at the same sizes, with rotary over every head dimension."""

    def __init__(self, profile, device):
        import transformers
        self.args, self.vocab, padded_vocab = model_args(profile, "rotary")
        a = self.args
        config = transformers.GPTNeoXConfig(
            vocab_size=padded_vocab, hidden_size=a.hidden_size, num_hidden_layers=a.num_layers,
            num_attention_heads=a.num_attention_heads, intermediate_size=a.intermediate_size or 4 * a.hidden_size,
            hidden_act="gelu", rotary_pct=a.rotary_pct, rotary_emb_base=a.rotary_emb_base,
            max_position_embeddings=a.seq_length, layer_norm_eps=a.layernorm_epsilon,
            use_parallel_residual=a.gpt_j_residual, tie_word_embeddings=not a.no_weight_tying,
            attention_dropout=0.0, hidden_dropout=0.0)
        torch.manual_seed(a.seed)
        self.model = transformers.GPTNeoXForCausalLM._from_config(config, attn_implementation="sdpa").to(device)
        self.device = torch.device(device)
        fused = {"fused": True} if self.device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=a.lr, weight_decay=0.0, **fused)
        self.autocast = a.precision == "bf16" and self.device.type == "cuda"
        self.batches = random_batches(a.train_micro_batch_size_per_gpu, a.seq_length, self.vocab, a.seed)

    def __call__(self):
        batch = {k: v.to(self.device) for k, v in next(self.batches).items()}
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.model(input_ids=batch["tokens"]).logits
        loss = lm_loss(logits, batch["labels"], batch["loss_mask"], self.vocab)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.gradient_clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def configurations(profile: str, device: str, methods) -> list[dict]:
    """(label, how to build it), in order of value, because building stops at half the budget: every method at
    `auto` and the peer (the step's ratios), `triton` (on CUDA, or on the CPU in Triton's interpreter) for the
    distance-table methods, and for a learnable table `sdpa` on CUDA (SDPA and the table gradient's side pass) and
    `sdpa_mask_gradient`, the old step, `none` and the learnable tables at a long length (LONG), the other loss
    head, the compiled layers (compiling takes longest), attention-sink, `flex` for distance-only methods on
    CUDA, and on the 162M profile the gpu-mini sweep's model."""
    def row(method, impl="auto", suffix="", overrides=None):
        label = method + (f"+{suffix}" if suffix else "")
        return {"label": label, "method": method, "impl": impl, **({"overrides": overrides} if overrides else {})}

    kernels_here = device == "cuda" or interpreting()
    auto = [row(m) for m in methods]
    peer = [{"label": PEER, "method": "rotary", "impl": "transformers sdpa"}]
    tables, sinks, flex = [], [], []
    for method in methods:
        if method in KERNEL_METHODS and (device == "cuda" or (interpreting() and method in LEARNABLE_TABLE_METHODS)):
            tables.append(row(method, "triton", "triton"))
        if method in LEARNABLE_TABLE_METHODS and device == "cuda":  # the path `auto` took there before `triton`
            tables.append(row(method, "sdpa", "sdpa"))
        if method in LEARNABLE_TABLE_METHODS:  # (a fixed table's mask needs no gradient: `sdpa` itself)
            tables.append(row(method, "sdpa_mask_gradient", "sdpa_mask_gradient"))
        if method in SINK_METHODS:
            sink = {"attention_sink": True}
            sinks.append(row(method, suffix="sink", overrides=sink))
            if kernels_here:
                sinks.append(row(method, "triton", "sink+triton", sink))
        args, _, _ = model_args(profile, method)
        if device == "cuda" and method != "none" and "query_terms" not in positional_embedding(args).channels:
            flex.append(row(method, "flex", "flex"))
    stepped = [m for m in STEP_VARIANT_METHODS if m in methods]
    variants = dict(VARIANTS)
    if model_args(profile, "none")[0].precision != "bf16":  # the tiny profile: the new step in bf16 too
        variants = {"bf16": {"precision": "bf16"}, **variants}
    steps = [row(m, suffix=v, overrides=o) for v, o in variants.items() if v != "compiled" for m in stepped]
    compiled = [row(m, suffix="compiled", overrides=VARIANTS["compiled"]) for m in stepped]
    long = [{"label": f"{m}@{LONG[profile]['seq_length']}", "method": m, "impl": "auto", "overrides": LONG[profile]}
            for m in LONG_METHODS if m in methods and profile in LONG]
    head = []
    if "none" in methods:
        label, overrides = OTHER_HEAD["cuda" if device == "cuda" else "cpu"]
        head.append(row("none", suffix=label, overrides=overrides))
    mini = [{"label": "gpu-mini/kerple_log", "method": "kerple_log", "impl": "auto", "profile": "gpu-mini"}] \
        if profile == "162M" else []
    return auto + peer + tables + steps + long + head + compiled + sinks + flex + mini


def build(config, profile, device):
    if config["label"] == PEER:
        return PeerStep(profile, device)
    return OurStep(config.get("profile", profile), config["method"], config["impl"], device, config.get("overrides"))


def timed(step, steps: int, device: str) -> float:
    """Seconds per step over `steps` steps, the device's queue drained at both ends."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps


def profile_step(step, device: str, steps: int = 2, top: int = 12) -> dict:
    """torch.profiler over `steps` steps: the kernels (device time on CUDA, CPU time otherwise) that take
    longest, their launch count, and the host's time from the end of the backward to the end of the step
    (train_step's AFTER_BACKWARD: all-reduce, clip, the host read, the optimizer; the peer has no such label)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    on_device = device == "cuda"
    own = (lambda e: e.self_device_time_total) if on_device else (lambda e: e.self_cpu_time_total)
    kernels = [e for e in events if (own(e) > 0 and not e.key.startswith(("Optimizer.", "ProfilerStep")))
               and (on_device or e.key.startswith("aten::"))]
    kernels.sort(key=own, reverse=True)
    after_backward_us = sum(e.cpu_time_total for e in events if e.key == AFTER_BACKWARD)
    return {"steps": steps, "clock": "device" if on_device else "cpu",
            "top": [{"name": e.key[:120], "ms_per_step": round(own(e) / 1e3 / steps, 3), "calls_per_step": e.count / steps}
                    for e in kernels[:top]],
            "after_backward_ms_per_step": round(after_backward_us / 1e3 / steps, 3),
            "kernel_launches_per_step": sum(e.count for e in events if own(e) > 0 and (
                e.device_type.name == "CUDA" if on_device else e.key.startswith("aten::"))) / steps}


def measure(profile: str, device: str, methods, steps: int, rounds: int, warmup: int, budget: float) -> dict:
    began = time.perf_counter()
    configs = configurations(profile, device, methods)
    runners = {}
    for config in configs:
        if time.perf_counter() - began > budget / 2:  # the timed rounds need the other half
            config["error"] = f"not built: half of the {budget:.0f} s budget was spent building the others"
            continue
        try:
            runners[config["label"]] = build(config, profile, device)
            built = runners[config["label"]].args
            config["tokens_per_step"] = built.train_micro_batch_size_per_gpu * built.seq_length
            timed(runners[config["label"]], warmup, device)  # compilation and allocator warm-up, not counted
        except Exception as err:  # noqa: BLE001 - one configuration failing must not hide the others
            runners.pop(config["label"], None)
            config["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:400]
            config["traceback"] = traceback.format_exc()[-2000:]
    seconds = {label: [] for label in runners}
    last_round = 0.0
    for _ in range(rounds):
        if seconds and min(map(len, seconds.values())) and time.perf_counter() - began + last_round > budget:
            break  # another round would overrun the budget; the rounds so far stand
        round_start = time.perf_counter()
        for label, runner in list(runners.items()):
            try:
                seconds[label].append(timed(runner, steps, device))
            except Exception as err:  # noqa: BLE001 - out of memory among many engines: drop this one, keep the rest
                failed = next(c for c in configs if c["label"] == label)
                why = f"{type(err).__name__} in round {len(seconds[label]) + 1}: {err}"
                failed["error"] = why.splitlines()[0][:400]
                del runners[label], seconds[label]
                runner = None
                gc.collect()  # an engine's hooks hold it in reference cycles: free its memory for the others now
                if device == "cuda":
                    torch.cuda.empty_cache()
        last_round = time.perf_counter() - round_start
    profiled = [label for label in PROFILED if label in runners and not (label == "none" and "none+bf16" in runners)]
    profiles = {label: profile_step(runners[label], device) for label in profiled}
    args, _, _ = model_args(profile, "none")
    for config in configs:
        times = seconds.get(config["label"])
        if times:
            config.update(seconds_per_step=statistics.median(times), rounds=times,
                          tokens_per_s=config["tokens_per_step"] / statistics.median(times))
    mini = next((c for c in configs if c.get("profile") == "gpu-mini"), None)
    if mini and "seconds_per_step" in mini:
        from tools.reproduce.spec import load_sweep
        mini_args, _, _ = model_args("gpu-mini", "kerple_log")
        sweep = load_sweep(GPU_MINI_SWEEP)
        mini.update(model=describe(mini_args), tokens_per_s=mini_args.train_micro_batch_size_per_gpu
                    * mini_args.seq_length / mini["seconds_per_step"], train_iters=mini_args.train_iters,
                    sweep_runs=len(sweep.methods) * len(sweep.seeds) * len(sweep.datasets))
    return {"profile": profile, "model": describe(args), "device": device, "steps_per_round": steps,
            "rounds_requested": rounds, "rounds_run": min((len(s) for s in seconds.values()), default=0),
            "warmup_steps": warmup, "seconds": round(time.perf_counter() - began, 1), "configs": configs,
            "profiles": profiles,
            "peak_memory_mb": round(torch.cuda.max_memory_allocated() / 2**20) if device == "cuda" else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--profile", default="162M", choices=["162M", "tiny"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--methods", nargs="+", default=list(TABLE4_METHODS),
                        help=f"positional methods (default: Table 4's and none; any of {', '.join(available())})")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per configuration per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--budget", type=float, default=140.0, help="seconds; no round starts that would pass it")
    cli = parser.parse_args(argv)
    methods = ["none"] + [m for m in cli.methods if m != "none"]  # `none` first: the ratios' baseline
    result = measure(cli.profile, cli.device, methods, cli.steps, cli.rounds, cli.warmup, cli.budget)
    with open(cli.json, "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
