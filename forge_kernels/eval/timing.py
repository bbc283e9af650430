"""Device timing (in the child, GPU only) and timing statistics (in the evaluator).

The child times with CUDA events through primitives captured before candidate code is imported
(:class:`TimingPrimitives`), flushing L2 before every timed call by zeroing a buffer twice the
L2 size, after a warm-up. It sends the raw per-call milliseconds; medians, spreads and the speedup
with its uncertainty are computed by the evaluator (:func:`summarize`, :func:`speedup`).
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from forge_kernels.eval.results import RuntimeStats

__all__ = [
    "TimingPrimitives",
    "time_calls",
    "l2_flush_buffer",
    "l2_persisting_limit",
    "reset_persisting_l2",
    "summarize",
    "speedup",
]


@dataclass(frozen=True)
class TimingPrimitives:
    """References taken before candidate import: later monkey-patching cannot reach them."""

    event: Any
    record: Any
    elapsed: Any
    synchronize: Callable[[], None]
    perf_counter: Callable[[], float]
    zero_: Any

    @classmethod
    def capture(cls) -> "TimingPrimitives":
        return cls(
            event=torch.cuda.Event,
            record=torch.cuda.Event.record,
            elapsed=torch.cuda.Event.elapsed_time,
            synchronize=torch.cuda.synchronize,
            perf_counter=time.perf_counter,
            zero_=torch.Tensor.zero_,
        )

    def still_installed(self) -> list[str]:
        """Names of the timing primitives that candidate code replaced (empty: none)."""
        current = {
            "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Event.record": torch.cuda.Event.record,
            "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
            "torch.cuda.synchronize": torch.cuda.synchronize,
            "time.perf_counter": time.perf_counter,
            "torch.Tensor.zero_": torch.Tensor.zero_,
        }
        captured = [self.event, self.record, self.elapsed, self.synchronize, self.perf_counter, self.zero_]
        return [name for (name, now), then in zip(current.items(), captured) if now is not then]


def time_calls(fn: Callable[[], Any], prims: TimingPrimitives, warmup: int, repeats: int,
               flush: torch.Tensor) -> list[float]:
    """Milliseconds of ``repeats`` calls of ``fn``, each after an L2 flush, measured with events."""
    for _ in range(warmup):
        fn()
    prims.synchronize()
    samples: list[float] = []
    for _ in range(repeats):
        prims.zero_(flush)
        start, end = prims.event(enable_timing=True), prims.event(enable_timing=True)
        prims.record(start)
        fn()
        prims.record(end)
        prims.synchronize()
        samples.append(float(prims.elapsed(start, end)))
    return samples


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A byte buffer twice the device's L2 size (at least 64 MiB); zeroing it evicts L2."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (32 << 20)
    return torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device=device)


def _cudart() -> Any:
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def l2_persisting_limit() -> int | None:
    """The device's persisting-L2 limit in bytes (``cudaLimitPersistingL2CacheSize``); None when the
    CUDA runtime library cannot be reached from Python. A non-zero value means someone set it."""
    lib = _cudart()
    if lib is None:
        return None
    value = ctypes.c_size_t(0)
    if lib.cudaDeviceGetLimit(ctypes.byref(value), ctypes.c_int(0x06)) != 0:
        return None
    return int(value.value)


def reset_persisting_l2() -> bool:
    """Evict persisting lines (``cudaCtxResetPersistingL2Cache``); False when unavailable."""
    lib = _cudart()
    return lib is not None and lib.cudaCtxResetPersistingL2Cache() == 0


def summarize(samples: list[float], trim_fraction: float) -> RuntimeStats:
    """Median, interquartile spread, trimmed mean and minimum of timed calls (ms)."""
    if not samples:
        raise ValueError("summarize needs at least one timing sample, got none")
    ordered = sorted(samples)
    n = len(ordered)
    cut = int(n * trim_fraction)
    kept = ordered[cut : n - cut] or ordered
    q1, _, q3 = statistics.quantiles(ordered, n=4) if n >= 2 else (ordered[0],) * 3
    return RuntimeStats(
        median_ms=statistics.median(ordered),
        spread_ms=q3 - q1,
        trimmed_mean_ms=statistics.fmean(kept),
        min_ms=ordered[0],
        samples=n,
    )


def _median_standard_error(samples: list[float]) -> float:
    """1.2533 * robust sigma / sqrt(n), with sigma from the median absolute deviation."""
    med = statistics.median(samples)
    mad = statistics.median(abs(s - med) for s in samples)
    return 1.2533 * 1.4826 * mad / math.sqrt(len(samples))


def speedup(reference: list[float], candidate: list[float]) -> tuple[float, float]:
    """Speedup (reference median / candidate median) and its one-sigma uncertainty (delta method)."""
    r, c = statistics.median(reference), statistics.median(candidate)
    if c <= 0 or r <= 0:
        raise ValueError(f"medians must be positive to form a speedup, got reference {r} and candidate {c}")
    s = r / c
    rel = math.hypot(_median_standard_error(reference) / r, _median_standard_error(candidate) / c)
    return s, s * rel
