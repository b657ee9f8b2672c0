"""The GPU check's report: report.json (everything measured) and report.md (the tables a reader wants).

The paper's Table 4 (seconds per step on one A100, tools/analysis/paper_numbers.py) is printed beside
the measured numbers, labelled as the paper's. Imports nothing heavy: the no-CUDA refusal stays instant.
"""
import datetime
import json
import math
import pathlib

FLEX_GOAL = 1.05  # the goal (not a test): the learnable tables at `auto`, and each path of the distance-only
# methods (triton, sdpa, sdpa_mask_gradient, flex), within 1.05x of `none`
LONG_GOAL = 1.10  # the same at the long training length (METHOD@LENGTH rows), against none@LENGTH
# The plain model's step against the peer's, and rotary's against none's: (row, its baseline, at most)
PEER_GOALS = (("none", "hf_gpt_neox", 1.00), ("none+compiled", "hf_gpt_neox", 0.85), ("rotary", "none", 1.03))


def why_not_passed(results: dict) -> list[str]:
    """What kept the run from passing (a test failed, a part stopped or broke); empty when it passed."""
    reasons = []
    tests = results.get("tests")
    if tests is not None and tests.get("exit_code") != 0:
        failed = tests.get("counts", {}).get("failed", 0) + tests.get("counts", {}).get("error", 0)
        reasons.append(("the tests part stopped at its time limit" if tests.get("timed_out")
                        else f"pytest exited with status {tests.get('exit_code')}")
                       + (f", {failed} test(s) failed" if failed else ""))
    reasons += [f"the {part} part did not finish ({str(results[part]['error']).splitlines()[0][:120]})"
                for part in ("install", "environment", "train", "eval", "loop", "fla")
                if "error" in results.get(part, {})]
    return reasons


def passed(results: dict) -> bool:
    return not why_not_passed(results)


def write(results: dict, out: pathlib.Path) -> list[pathlib.Path]:
    results = {**results, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    json_path, md_path = out / "report.json", out / "report.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(render(results))
    return [md_path, json_path] + ([out / "tests.log"] if (out / "tests.log").is_file() else [])


def render(results: dict) -> str:
    env = results.get("environment", {})
    lines = ["# GPU check\n",
             f"Written by `{results['command']}` on {results['created']} in {results['total_s']:.0f} s "
             f"(profile {results['profile']}; time limits per part: "
             + ", ".join(f"{k} {v} s" for k, v in results["budgets_s"].items()) + ").\n",
             "**Verdict: passed** (every test run passed and every part finished).\n" if passed(results) else
             "**Verdict: FAILED**: " + "; ".join(why_not_passed(results)) + ".\n"]
    if results["profile"] == "tiny":
        lines.append("_Developer smoke run at toy sizes: these numbers say nothing about any GPU._\n")
    lines += _environment(env, results.get("install", {})) + _tests(results.get("tests"))
    lines += _train(results.get("train")) + _eval(results.get("eval"))
    lines += _loop(results.get("loop")) + _fla(results.get("fla"))
    return "\n".join(lines) + "\n"


def _environment(env, install):
    if "error" in env:
        return ["## Machine\n", f"Not described: {env['error']}\n"]
    versions = ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items() if v)
    device = (f"{env['gpu']} ({env['gpu_memory_gib']} GiB, compute capability {env['compute_capability']}, "
              f"{env['gpus']} device(s)), CUDA {env['cuda']}, cuDNN {env['cudnn']}, driver {env.get('driver')}"
              if env.get("gpu") else "no GPU (CPU run)")
    wheels = (f"{install['wheels']} wheels installed into {install['site']}" if install.get("site") else
              install.get("note") or (f"wheel install failed: {install['error']}" if install.get("error") else "none"))
    return ["## Machine\n", f"- device: {device}", f"- Python {env.get('python')} ({env.get('executable')}), "
            f"DeepSpeed accelerator `{env.get('deepspeed_accelerator')}`", f"- versions: {versions}",
            f"- carried wheels: {wheels}", ""]


def _tests(tests):
    if tests is None:
        return []
    lines = ["## Tests\n", f"`{tests['command']}` ({tests['seconds']:.0f} s of {tests['budget_s']} s)\n"]
    if tests["timed_out"]:
        lines.append(f"**Stopped at its time limit**; outcomes so far: {tests['counts']}\n")
    else:
        lines.append(f"Result: {tests['summary'] or tests['counts']} (exit code {tests['exit_code']})\n")
    if "two_ranks" in tests:  # absent from the reports written before it existed
        lines.append(f"Two GPUs, the GPU guide's multi-GPU command (`{tests['two_ranks']['test']}`): "
                     f"{tests['two_ranks']['outcome']}\n")
    if tests["deselected"]:
        lines.append("Deselected (need two devices): " + ", ".join(f"`{t}`" for t in tests["deselected"]) + "\n")
    if tests["failed"]:
        reasons = tests.get("reasons", {})
        lines += ["Failed:\n", *[f"- `{t}`" + (f": {reasons[t][:300]}" if t in reasons else "") for t in tests["failed"]], ""]
    lines.append(f"Full output: `{tests['log']}` beside this report.\n")
    return lines


def _ratio(a, b):
    return f"{a / b:.3f}" if a and b else ""


def _train(train):
    if train is None:
        return []
    if "error" in train:
        return ["## Training step\n", f"Did not finish: {train['error']}\n", "```", train.get("log_tail", ""), "```\n"]
    from tools.analysis.paper_numbers import TABLE4
    from .profiles import LEARNABLE_TABLE_METHODS
    configs = [c for c in train["configs"] if not c.get("profile")]
    step = {c["label"]: c.get("seconds_per_step") for c in configs}
    none, alibi = step.get("none"), step.get("alibi")
    lines = ["## Training step (Table 4)\n",
             f"{train['model']}; median of {train['rounds_run']} interleaved rounds x {train['steps_per_round']} "
             f"steps after {train['warmup_steps']} warm-up steps ({train['rounds_requested']} rounds asked; fewer "
             "when the time limit came first)."
             + (f" Peak memory of all engines together: {train['peak_memory_mb']:,} MB." if train["peak_memory_mb"]
                else "") + "\n",
             "| configuration | attention | s/step | tokens/s | vs none | vs ALiBi | paper s/step (A100) | "
             "paper vs ALiBi |", "|---|---|---|---|---|---|---|---|"]
    for c in configs:
        s = c.get("seconds_per_step")
        paper = TABLE4.get(c["method"]) if c["impl"] == "auto" and not c.get("overrides") else None
        length = _length(c["label"])
        baseline, against_alibi = (step.get(f"none@{length}"), None) if length else (none, alibi)
        cells = ([f"{s:.4f}", f"{c['tokens_per_s']:,.0f}", _ratio(s, baseline), _ratio(s, against_alibi)] if s else
                 [f"error: {c.get('error', 'not measured')}", "", "", ""])
        lines.append(f"| {c['label']} | {c['impl']} | " + " | ".join(cells) + f" | {paper or ''} | "
                     f"{_ratio(paper, TABLE4['alibi']) if paper else ''} |")
    lines.append("\nPaper columns: the KERPLE paper's Table 4 (one A100, GitHub), not this machine. The peer "
                 "`hf_gpt_neox` is transformers' GPTNeoXForCausalLM (rotary) at the same size; on CUDA with fp32 "
                 "weights under bf16 autocast and torch's fused AdamW, as its users train it.\n")
    learnable_at_auto = [c for c in configs if c["impl"] == "auto" and not c.get("overrides")
                         and c["method"] in LEARNABLE_TABLE_METHODS]
    for impl in ("auto", "triton", "sdpa", "sdpa_mask_gradient", "flex"):
        timed = [c for c in (learnable_at_auto if impl == "auto" else configs)
                 if c["impl"] == impl and c.get("seconds_per_step") and none]
        if timed:
            met = [c["label"] for c in timed if c["seconds_per_step"] <= FLEX_GOAL * none]
            which = "the learnable distance tables at `auto`" if impl == "auto" else f"the methods run with `{impl}`"
            lines.append(f"Goal (not a test): {which} within {FLEX_GOAL}x of `none`: "
                         f"{len(met)} of {len(timed)} ({', '.join(met) or 'not one'}).\n")
    long = [c for c in configs if _length(c["label"]) and c["method"] != "none" and c.get("seconds_per_step")
            and step.get(f"none@{_length(c['label'])}")]
    if long:
        met = [c["label"] for c in long if c["seconds_per_step"] <= LONG_GOAL * step[f"none@{_length(c['label'])}"]]
        lines.append(f"Goal (not a test): at the long length, within {LONG_GOAL}x of `none` there: {len(met)} of "
                     f"{len(long)} ({', '.join(met) or 'not one'}).\n")
    versus = [f"`{row}` {_ratio(step[row], step[base])}x `{base}` (goal <= {goal:.2f})"
              for row, base, goal in PEER_GOALS if step.get(row) and step.get(base)]
    if versus:
        lines.append("Goals (not tests): " + "; ".join(versus) + ".\n")
    if any("+" in c["label"] for c in configs):
        lines.append("Step variants: `+old-step` is DeepSpeed's bf16 engine (bf16-weights: bf16; the rows without "
                     "it keep fp32 weights, under bf16 autocast in bf16), `+bf16` the same method in bf16 where the "
                     "profile is fp32, `+compiled` compiles each layer (compile-blocks), `+sliced-head` / `+full-head` the "
                     "loss head `auto` does not take on this device (loss-head: sliced, or full logits).\n")
    if any(_length(c["label"]) for c in configs):
        lines.append("`METHOD@LENGTH` trains at that length with as many tokens per step as the rest (fewer "
                     "sequences); its `vs none` is against `none@LENGTH`.\n")
    lines += _profiles(train.get("profiles") or {})
    lines += _gpu_mini(next((c for c in train["configs"] if c.get("profile") == "gpu-mini"), None))
    return lines


def _length(label: str) -> str | None:
    """The length of a METHOD@LENGTH row (training at a long length), else None."""
    return label.partition("@")[2] or None


def _profiles(profiles: dict) -> list:
    lines = []
    for label, summary in profiles.items():
        lines += [f"### Profile of `{label}` ({summary['steps']} steps, torch.profiler, {summary['clock']} time)\n",
                  f"Per step: {summary['kernel_launches_per_step']:,.0f} "
                  + ("kernel launches" if summary["clock"] == "device" else "aten calls (nested ones included)") + "; "
                  f"{summary['after_backward_ms_per_step']:.2f} ms on the host from the end of the backward to the "
                  "end of the step (all-reduce, clip, host read, optimizer).\n",
                  "| op | ms/step | calls/step |", "|---|---|---|"]
        lines += [f"| `{k['name']}` | {k['ms_per_step']:.3f} | {k['calls_per_step']:g} |" for k in summary["top"]]
        lines.append("")
    return lines


def _gpu_mini(mini):
    if not mini:
        return []
    if "seconds_per_step" not in mini:
        return [f"gpu-mini profile: not measured ({mini.get('error', 'no rounds')}).\n"]
    minutes = mini["seconds_per_step"] * mini["train_iters"] * mini["sweep_runs"] / 60
    return [f"gpu-mini sweep model ({mini['model']}), KERPLE-log: {mini['seconds_per_step']:.4f} s/step, "
            f"{mini['tokens_per_s']:,.0f} tokens/s. Projection (one run at a time, training steps only): "
            f"{mini['train_iters']} steps x {mini['sweep_runs']} runs x {mini['seconds_per_step']:.4f} s = "
            f"{minutes:.1f} min.\n"]


def _eval(evaluation):
    if evaluation is None:
        return []
    if "error" in evaluation:
        return ["## Evaluation at long lengths\n", f"Did not finish: {evaluation['error']}\n", "```",
                evaluation.get("log_tail", ""), "```\n"]
    cell = {(r["impl"], r["length"]): r for r in evaluation["rows"]}
    lengths = sorted({r["length"] for r in evaluation["rows"]})
    impls = [impl for impl in ("auto", "sdpa", "triton") if any(r["impl"] == impl for r in evaluation["rows"])]
    lines = ["## Evaluation at long lengths\n",
             f"{evaluation['method']}, {evaluation['model']}, {evaluation['dtype']}, one sequence per pass, "
             f"no autograd (evaluate.py's scoring); weights {evaluation['weights_mb']} MB. Peak memory: "
             f"{evaluation['peak_memory']}.\n",
             "| L | " + " | ".join(f"{impl} tokens/s | {impl} peak MB" for impl in impls) + " |",
             "|---|" + "---|---|" * len(impls)]
    for length in lengths:
        row = [str(length)]
        for impl in impls:
            r = cell.get((impl, length), {})
            if "peak_mb" in r:
                row += [f"{r['tokens_per_s']:,.0f}", f"{r['peak_mb']:,.0f}"]
            else:
                row += [r.get("skipped") or r.get("error") or "", ""]
        lines.append("| " + " | ".join(row) + " |")
    growth = {impl: _growth(cell, impl, lengths) for impl in impls}
    if any(growth.values()):
        lines.append("\nGrowth of each path's peak memory between lengths, as the exponent k in peak ~ L^k "
                     "(1 = linear, 2 = quadratic): "
                     + "; ".join(f"`{impl}` " + ", ".join(g) for impl, g in growth.items() if g) + ".\n")
    both = [n for n in lengths if all("tokens_per_s" in cell.get((impl, n), {}) for impl in ("triton", "sdpa"))]
    if both:  # the kernel against the materialised bias, where the materialised bias still fits
        kernel, materialised = cell["triton", both[-1]], cell["sdpa", both[-1]]
        lines.append(f"At {both[-1]:,} tokens, the longest length both ran: `triton` at "
                     f"{kernel['tokens_per_s'] / materialised['tokens_per_s']:.2f}x `sdpa`'s tokens/s, "
                     f"{kernel['peak_mb']:,.0f} MB against {materialised['peak_mb']:,.0f} MB at its peak.\n")
    longest = max((r for r in evaluation["rows"] if "seconds" in r), key=lambda r: (r["length"], -r["seconds"]),
                  default=None)
    if longest:
        lines.append(f"Longest sequence scored in one pass: {longest['length']:,} tokens with `{longest['impl']}`, "
                     f"{longest['seconds']:.1f} s.\n")
    return lines


def _growth(cell, impl, lengths):
    out = []
    for a, b in zip(lengths, lengths[1:]):
        pa, pb = cell.get((impl, a), {}).get("peak_mb"), cell.get((impl, b), {}).get("peak_mb")
        if pa and pb and pa > 0 and pb > 0:
            out.append(f"{a}->{b}: {math.log(pb / pa) / math.log(b / a):.2f}")
    return out


def _did_not_finish(title, part):
    return [f"## {title}\n", f"Did not finish: {part['error']}\n", "```", part.get("log_tail", ""), "```\n"]


def _loop(loop):
    if loop is None:
        return []
    title = "Training loop (deepy.py train.py)"
    if "launches" not in loop:
        return _did_not_finish(title, loop)
    lines = [f"## {title}\n",
             f"`python deepy.py train.py {loop['config']}` on the code corpus tokenized there with GPT-2 BPE by "
             f"tools/datasets/preprocess_data.py ({loop.get('tokens', 0):,} tokens, "
             f"{loop['tokenize']['wall_s']} s), {loop['steps']} steps in two launches: the first stops at step "
             f"{loop['steps'] // 2} (`exit-interval`) and saves, the second resumes from that checkpoint.\n",
             "| launch | exit code | wall s | losses logged (step: loss) | latest checkpoint |", "|---|---|---|---|---|"]
    for launch in loop["launches"]:
        losses = ", ".join(f"{step}: {loss:.3f}" for step, loss in launch["losses"])
        lines.append(f"| {launch['half']} | {launch['exit_code']} | {launch['wall_s']} | {losses} | "
                     f"{launch['latest'] or ''} |")
    if "loss_first" in loop:
        lines.append(f"\nLoss {loop['loss_first']:.3f} -> {loop['loss_last']:.3f}; the resumed launch read "
                     f"{loop['resumed_from']} and logged step {loop['resumed_first_logged_step']} first; checkpoints "
                     f"written: {', '.join(loop['checkpoints'])}.\n")
    if "error" in loop:
        lines += [f"\n**{loop['error']}**\n", "```", loop.get("log_tail", ""), "```\n"]
    return lines


def _fla(fla):
    if fla is None:
        return []
    title = "flash-linear-attention's kernels against this project's paths"
    if "rows" not in fla:
        return _did_not_finish(title, fla)
    size = fla["sizes"]
    lines = [f"## {title}\n",
             f"fla-core {fla['fla_version']}; batch {size['batch']}, {size['heads']} heads, head dim {size['dim']}. "
             "Errors: largest absolute difference from this project's path in fp32, over the reference's largest "
             "absolute value, for the output and dq, dk, dv; seconds: forward + backward, median of 5.\n",
             "| method | L | our path | ours bf16: out / dq / dk / dv | ours s | fla: out / dq / dk / dv | fla s | "
             "fla / ours |", "|---|---|---|---|---|---|---|---|"]

    def cells(result):
        if not result:
            return ["", ""]
        if "error" in result:
            return [f"error: {result['error']}", ""]
        return [" / ".join(f"{result[k]:.1e}" for k in ("out", "dq", "dk", "dv")), f"{result['seconds']:.4f}"]

    for row in fla["rows"]:
        if "skipped" in row or "error" in row:
            lines.append(f"| {row['method']} | {row['length']} | {row.get('skipped') or 'error: ' + row['error']} "
                         "| | | | | |")
            continue
        theirs = row.get("fla_bf16")
        mine = row.get("ours_bf16")
        speed = _ratio(theirs.get("seconds"), mine.get("seconds")) if theirs and mine else ""
        lines.append(f"| {row['method']} | {row['length']} | {row.get('our_path', '')} | "
                     + " | ".join(cells(mine) + cells(theirs)) + f" | {speed} |")
    notes = sorted({row["fla"] for row in fla["rows"] if row.get("fla")})
    lines += [f"\n{note}.\n" for note in notes]
    return lines
