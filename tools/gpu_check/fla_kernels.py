"""Part 5 of the GPU check: the `fla` strategy (megatron/model/attention/fla_kernels.py: flash-linear-attention's
Triton kernels, the strategy `auto` takes on CUDA in bf16/fp16) against this project's own `sdpa` path for the
methods fla also implements — FoX (forgetting attention), stick-breaking and PaTH (with and without its
forget gate) — agreement and speed.

    python -m tools.gpu_check.fla_kernels --json OUT.json [--device cuda|cpu] [--budget SECONDS]

For each method and length: q, k, v (and the method's per-token inputs: FoX's log forget gate, PaTH's unit
w and beta in (0, 2)) drawn at random, [B=2, H=12, L, D=64] as in the 162M model. Agreement: this project's
`sdpa` path (written out where the method needs it) and the `fla` strategy, both in bf16, each against the
`sdpa` path in fp32 (the reference here; the CPU tests tie that path to the float64 formulas and to fla's
own naive.py), as the largest absolute difference of the output and of dq, dk, dv, each divided by the
reference's largest absolute value. Speed: forward + backward in bf16, median of 5 timed calls after 2
untimed ones (fla's kernels compile on first use). Both run through plan_attention and attend, as a model
does: fla's conventions (its [B, L, H, D] layout, PaTH's gate scale) are written once, in the strategy.

On CPU (`--device cpu`, the developers' smoke run) fla's kernels cannot run and the strategy refuses: only
this project's path is timed. The strategy's conventions are checked on CPU by
tests/model/positional/test_fla_kernels.py, with fla's naive.py functions in place of the kernels.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.positional_embeddings import build_positional_embedding

METHODS = ("fox", "stickbreaking", "path", "path_fox")
SIZES = {"cuda": dict(batch=2, heads=12, dim=64, lengths=(2048, 8192)),
         "cpu": dict(batch=1, heads=2, dim=16, lengths=(128,))}


def inputs(method, batch, heads, length, dim, device, seed=0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=generator).to(device)  # noqa: E731
    q, k, v = (draw(batch, heads, length, dim) for _ in range(3))
    extra = {}
    if method in ("fox", "path_fox"):
        extra["log_f"] = F.logsigmoid(draw(batch, heads, length) + 3)  # mostly remembering, as trained gates
    if method.startswith("path"):
        extra["w"] = F.normalize(draw(batch, heads, length, dim), dim=-1)
        extra["beta"] = 2 * torch.sigmoid(draw(batch, heads, length))
    return q, k, v, extra


def ours(method, q, k, v, extra, impl="sdpa", block_size=512):
    """This project's attention for the method through plan_attention and attend: `sdpa` (written out where the
    method needs it) or `fla` (fla's kernels, CUDA and bf16/fp16 only)."""
    heads, length, dim = q.shape[1], q.shape[2], q.shape[3]
    name = {"path_fox": "path"}.get(method, method)
    options = {"path_forget_gate": True} if method == "path_fox" else {}
    pe = build_positional_embedding(name, num_heads=heads, head_dim=dim, hidden_size=heads * dim, **options)
    pe = pe.to(q.device)
    plan = plan_attention(pe, torch.arange(length, device=q.device),
                          AttentionRun(impl=impl, window=None, block_size=block_size, needs_grad=True, dropout_p=0.0,
                                       dtype=q.dtype, batch=q.shape[0]))
    plan = plan.with_layer({"token_terms": extra.get("log_f"),
                            "key_transforms": (extra["w"].to(q.dtype), extra["beta"].to(q.dtype)) if "w" in extra else None})
    return plan.name, attend(q, k, v, plan)


def forward_backward(function, q, k, v, extra, grad_out):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = function(*leaves, extra)
    out.backward(grad_out.to(out.dtype))
    return out.detach().float(), [x.grad.float() for x in leaves]


def relative(got, want):
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def timed(function, q, k, v, extra, grad_out, device, reps=5, warmup=2):
    times = []
    for i in range(warmup + reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        forward_backward(function, q, k, v, extra, grad_out)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(device: str, budget: float, json_path: str | None = None) -> dict:
    began, rows = time.perf_counter(), []
    size = SIZES[device]
    from megatron.model.attention.fla_kernels import fla_problem
    problem = fla_problem() if device == "cuda" else "fla's Triton kernels need CUDA"  # None: they run here
    for length in size["lengths"]:
        for method in METHODS:
            row = {"method": method, "length": length}
            rows.append(row)
            if time.perf_counter() - began > budget:
                row["skipped"] = "time budget spent"
                continue
            try:
                q, k, v, extra = inputs(method, size["batch"], size["heads"], length, size["dim"], device)
                grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device)
                mine = lambda q, k, v, extra: ours(method, q, k, v, extra)[1]  # noqa: E731
                reference = forward_backward(mine, q, k, v, extra, grad_out)
                half = [x.bfloat16() for x in (q, k, v)] if device == "cuda" else [q, k, v]
                with torch.no_grad():
                    row["our_path"] = ours(method, *half, extra)[0]
                candidates = {"ours_bf16": mine} if device == "cuda" else {}
                if problem is None:
                    candidates["fla_bf16"] = lambda q, k, v, extra: ours(method, q, k, v, extra, impl="fla")[1]  # noqa: E731
                else:
                    row["fla"] = (f"{problem}; the fla strategy's conventions are checked on CPU against fla's "
                                  "naive.py (tests/model/positional/test_fla_kernels.py)")
                for label, function in candidates.items():
                    try:
                        out, grads = forward_backward(function, *half, extra, grad_out)
                        row[label] = {"out": relative(out, reference[0]),
                                      **{f"d{n}": relative(g, r) for n, g, r in zip("qkv", grads, reference[1])},
                                      "seconds": round(timed(function, *half, extra, grad_out, device), 5)}
                    except Exception as err:  # noqa: BLE001 - one kernel failing must not hide the others
                        row[label] = {"error": f"{type(err).__name__}: {err}".splitlines()[0][:400]}
                if device == "cpu":
                    row["ours_fp32_seconds"] = round(timed(mine, q, k, v, extra, grad_out, device, reps=1, warmup=0), 5)
            except Exception as err:  # noqa: BLE001
                row["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:400]
            finally:
                if device == "cuda":
                    torch.cuda.empty_cache()
            if json_path:  # after each row: a part killed at its limit (fla's kernels compile slowly) keeps them
                with open(json_path, "w") as out:
                    json.dump(_result(device, size, began, rows), out, indent=1)
    return _result(device, size, began, rows)


def _result(device, size, began, rows):
    return {"device": device, "sizes": {k: v for k, v in size.items() if k != "lengths"},
            "seconds": round(time.perf_counter() - began, 1), "rows": rows,
            "fla_version": _version("fla-core")}


def _version(name):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--profile", default="162M", help="(sizes follow --device)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--budget", type=float, default=45.0)
    cli = parser.parse_args(argv)
    result = measure(cli.device, cli.budget, cli.json)
    with open(cli.json, "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
