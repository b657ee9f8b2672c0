"""Part 5 of the GPU check: flash-linear-attention's Triton kernels against this project's own paths for
the methods fla also implements — FoX (forgetting attention), stick-breaking and PaTH (with and without
its forget gate) — agreement and speed.

    python -m tools.gpu_check.fla_kernels --json OUT.json [--device cuda|cpu] [--budget SECONDS]

For each method and length: q, k, v (and the method's per-token inputs: FoX's log forget gate, PaTH's unit
w and beta in (0, 2)) drawn at random, [B=2, H=12, L, D=64] as in the 162M model. Agreement: this
project's own `sdpa` path (written out where the method needs it) and fla's kernel in bf16, each against this project's path in fp32 (the reference
here; the CPU tests tie that path to the float64 formulas and to fla's own naive.py), as the largest
absolute difference of the output and of dq, dk, dv, each divided by the reference's largest absolute
value. Speed: forward + backward in bf16, median of 5 timed calls after 2 untimed ones (fla's kernels
compile on first use). The conventions mapped here are the ones tests/model/positional/ check on CPU
against fla's naive references: fla's tensors are [B, L, H, D]; fla's PaTH gate is scaled by 1/sqrt(D)
with the dot products, ours is not, so fla is given g * sqrt(D).

On CPU (`--device cpu`, the developers' smoke run) fla's Triton kernels cannot run: fla's naive.py
functions stand in for them (in fp32, at toy sizes), so the mapping of conventions is exercised there.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

from megatron.model.attention import attend, plan_attention
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


def ours(method, q, k, v, extra, block_size=512):
    heads, length, dim = q.shape[1], q.shape[2], q.shape[3]
    name = {"path_fox": "path"}.get(method, method)
    options = {"path_forget_gate": True} if method == "path_fox" else {}
    pe = build_positional_embedding(name, num_heads=heads, head_dim=dim, hidden_size=heads * dim, **options)
    pe = pe.to(q.device)
    # `sdpa`, not `auto`: on CUDA in bf16 `auto` now takes fla's kernels themselves (attention/fla_kernels.py).
    plan = plan_attention(pe, torch.arange(length, device=q.device), impl="sdpa", window=None,
                          block_size=block_size, needs_grad=True, dropout_p=0.0, dtype=q.dtype, batch=q.shape[0])
    if "log_f" in extra:
        plan = plan.with_token_terms(extra["log_f"])
    if "w" in extra:
        plan = plan.with_key_transforms((extra["w"].to(q.dtype), extra["beta"].to(q.dtype)))
    return plan.name, attend(q, k, v, plan)


def theirs(method, q, k, v, extra, naive=False):
    """fla's Triton kernel (or, `naive`, its plain-torch naive.py) on [B, L, H, D] tensors; the output back
    in [B, H, L, D]."""
    t = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731
    dim = q.shape[-1]
    if method == "fox":
        kernel = _naive("forgetting_attn") if naive else _kernel("forgetting_attn", "parallel_forgetting_attn")
        out = kernel(t(q), t(k), t(v), t(extra["log_f"].float()), scale=dim ** -0.5)
    elif method == "stickbreaking":
        kernel = _naive("stickbreaking_attn") if naive else _kernel("stickbreaking_attn", "parallel_stickbreaking_attn")
        out, _ = kernel(t(q), t(k), t(v), scale=dim ** -0.5, attend_current=False)
    else:
        gate = t(extra["log_f"].float()) * math.sqrt(dim) if method == "path_fox" else None
        w, beta = t(extra["w"].float()), t(extra["beta"].float())
        if naive:  # naive.py takes a gate always (zeros: none) and returns the output alone
            out = _naive("path_attn")(t(q), t(k), t(v), w, beta, torch.zeros_like(beta) if gate is None else gate,
                                  scale=dim ** -0.5)
        else:
            out, _ = _kernel("path_attn", "parallel_path_attn")(t(q), t(k), t(v), w, beta, gate, scale=dim ** -0.5)
    return out.transpose(1, 2)


def _kernel(op, function):
    import importlib
    return getattr(importlib.import_module(f"fla.ops.{op}"), function)


def _naive(op):
    """fla/ops/<op>/naive.py's naive_<op>, loaded by path: importing the package runs its __init__, which
    imports the Triton kernels (absent on a CPU machine)."""
    import importlib.util
    import pathlib
    root = pathlib.Path(importlib.util.find_spec("fla").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", root / "ops" / op / "naive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"naive_{op}")


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
    try:
        import importlib.util
        if importlib.util.find_spec("fla") is None:
            raise ImportError("No module named 'fla'")
        fla_problem = None if device == "cuda" else "fla's Triton kernels need CUDA"
    except ImportError as err:
        fla_problem = f"fla does not import here ({err}); `make gpu-wheels` carries fla-core"
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
                if fla_problem is None:
                    candidates["fla_bf16"] = lambda q, k, v, extra: theirs(method, q, k, v, extra)  # noqa: E731
                elif device == "cpu" and "import" not in fla_problem:  # the smoke run: the mapping, via naive.py
                    row["fla"] = fla_problem + "; fla's naive.py in fp32 instead"
                    candidates["fla_naive_fp32"] = lambda q, k, v, extra: theirs(method, q, k, v, extra, naive=True)  # noqa: E731
                else:
                    row["fla"] = fla_problem
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
