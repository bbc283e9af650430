"""Logprob + entropy over a large vocabulary: the fused Triton kernels against eager torch.

    python -m bench.logprob [--rows 8192] [--vocab 151936] [--dtype bfloat16] [--repeats 10]
    python -m bench.logprob --quick          # small shapes, runs on CPU under the interpreter

Prints one JSON line: ``{"bench": "logprob", "device", "shape", "dtype", "fwd_ms", "fwd_bwd_ms",
"extra_gib", "eager_fwd_ms", "eager_fwd_bwd_ms", "eager_extra_gib", "fwd_gbps", "bwd_gbps",
"chunked_fwd_ms", "chunked_fwd_bwd_ms", "max_abs_err": {...}}``: medians over ``--repeats``
after warm-up, timed with CUDA events; extra memory is the peak allocated during forward +
backward minus the logits and their gradient. Bandwidth counts the bytes each pass must move
(forward: read the logits; backward: read them again and write the gradient).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch

from losses.ops import token_logprobs


def _eager(x: torch.Tensor, targets: torch.Tensor, temperature: float):
    logp = torch.log_softmax(x.float() / temperature, -1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _impl(name: str) -> Callable:
    if name == "eager":
        return _eager
    return lambda x, t, temp: token_logprobs(x, t, temp, impl=name)[0]


def _time(fn: Callable[[], None], repeats: int, cuda: bool) -> float:
    fn()
    fn()  # warm-up: compilation, allocator
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(name: str, logits: torch.Tensor, targets: torch.Tensor, temperature: float, repeats: int) -> dict:
    fn, cuda = _impl(name), logits.is_cuda
    x = logits.detach().clone().requires_grad_()
    w = torch.randn(logits.shape[0], device=logits.device)

    def forward() -> None:
        with torch.no_grad():
            fn(x, targets, temperature)

    def forward_backward() -> None:
        x.grad = None
        lp, h = fn(x, targets, temperature)
        ((lp * w).sum() + (h * w).sum()).backward()

    out = {"fwd_ms": _time(forward, repeats, cuda), "fwd_bwd_ms": _time(forward_backward, repeats, cuda)}
    if cuda:
        x.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        forward_backward()
        torch.cuda.synchronize()
        grad_bytes = x.grad.numel() * x.grad.element_size()
        out["extra_gib"] = (torch.cuda.max_memory_allocated() - base - grad_bytes) / 2**30
    lp, h = fn(x, targets, temperature)
    out["values"] = (lp.detach().double(), h.detach().double())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="64 x 4000 on CPU (the interpreter), 2 repeats")
    p.add_argument("--skip-chunked", action="store_true")
    p.add_argument("--fused-only", action="store_true", help="time only the fused kernels (for sweeps)")
    p.add_argument("--hidden", type=int, default=4096, help="d of the fused LM-head measurement (0: skip it)")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.quick:
        args.rows, args.vocab, args.repeats = 64, 4000, 2
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    logits = (torch.randn(args.rows, args.vocab, device=device) * 2).to(dtype)
    targets = torch.randint(0, args.vocab, (args.rows,), device=device)
    fused = measure("fused", logits, targets, args.temperature, args.repeats)
    if args.fused_only:
        nbytes = logits.numel() * logits.element_size()
        print(json.dumps({"bench": "logprob_sweep", "block": os.environ.get("FORGE_LOGPROB_BLOCK"),
                          "warps": os.environ.get("FORGE_LOGPROB_WARPS"), "splits": os.environ.get("FORGE_LOGPROB_SPLITS"),
                          "fwd_ms": round(fused["fwd_ms"], 3), "fwd_bwd_ms": round(fused["fwd_bwd_ms"], 3),
                          "fwd_gbps": round(nbytes / (fused["fwd_ms"] * 1e-3) / 1e9, 1)}), flush=True)
        return
    eager = measure("eager", logits, targets, args.temperature, args.repeats)
    row = {"bench": "logprob", "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
           "shape": [args.rows, args.vocab], "dtype": args.dtype,
           "fwd_ms": round(fused["fwd_ms"], 3), "fwd_bwd_ms": round(fused["fwd_bwd_ms"], 3),
           "extra_gib": round(fused["extra_gib"], 4) if "extra_gib" in fused else None,
           "eager_fwd_ms": round(eager["fwd_ms"], 3), "eager_fwd_bwd_ms": round(eager["fwd_bwd_ms"], 3),
           "eager_extra_gib": round(eager["extra_gib"], 3) if "extra_gib" in eager else None}
    nbytes = logits.numel() * logits.element_size()
    row["fwd_gbps"] = round(nbytes / (fused["fwd_ms"] * 1e-3) / 1e9, 1)
    bwd_ms = fused["fwd_bwd_ms"] - fused["fwd_ms"]
    row["bwd_gbps"] = round(2 * nbytes / (bwd_ms * 1e-3) / 1e9, 1) if bwd_ms > 0 else None
    if not args.skip_chunked:
        chunked = measure("chunked", logits, targets, args.temperature, args.repeats)
        row["chunked_fwd_ms"], row["chunked_fwd_bwd_ms"] = round(chunked["fwd_ms"], 3), round(chunked["fwd_bwd_ms"], 3)
    ref_lp, ref_h = _eager(logits.double(), targets, args.temperature)
    row["max_abs_err"] = {"logprob": float((fused["values"][0] - ref_lp).abs().max()),
                          "entropy": float((fused["values"][1] - ref_h).abs().max())}
    if args.hidden:
        del logits, fused, eager
        row["fused_lm_head"] = measure_lm_head(args.rows, args.hidden, args.vocab, dtype, args.temperature,
                                               args.repeats, device)
    print(json.dumps(row), flush=True)


def measure_lm_head(rows: int, d: int, vocab: int, dtype: torch.dtype, temperature: float, repeats: int,
                    device: str) -> dict:
    """Logprob + entropy from hidden states and the LM head: the fused path (vocabulary chunks,
    no [N, V] logits) against the unfused one (matmul, then the fused kernels), forward +
    backward, with the extra memory beyond the hidden/weight gradients."""
    from losses.ops import token_logprobs_from_hidden

    if device == "cpu":
        rows, d, vocab = 16, 64, 3000
    torch.manual_seed(0)
    hidden = torch.randn(rows, d, device=device).to(dtype)
    weight = (torch.randn(vocab, d, device=device) * d ** -0.5).to(dtype)
    targets = torch.randint(0, vocab, (rows,), device=device)
    g = torch.randn(rows, device=device)
    out: dict = {"shape": [rows, d, vocab]}
    for name in ("unfused", "fused"):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()

        def step() -> None:
            h.grad = w.grad = None
            if name == "fused":
                lp, ent = token_logprobs_from_hidden(h, w, targets, temperature)[0]
            else:
                lp, ent = token_logprobs(h @ w.t(), targets, temperature)[0]
            ((lp * g).sum() + (ent * g).sum()).backward()

        out[f"{name}_fwd_bwd_ms"] = round(_time(step, repeats, device == "cuda"), 3)
        if device == "cuda":
            h.grad = w.grad = None
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            step()
            torch.cuda.synchronize()
            grads = sum(t.numel() * t.element_size() for t in (h.grad, w.grad))
            out[f"{name}_extra_gib"] = round((torch.cuda.max_memory_allocated() - base - grads) / 2**30, 3)
    out["time_ratio"] = round(out["fused_fwd_bwd_ms"] / out["unfused_fwd_bwd_ms"], 3)
    return out


if __name__ == "__main__":
    main()
