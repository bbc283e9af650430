"""Metrics: record anywhere, reduce exactly, flush step-wise to console, TensorBoard and JSON lines.

``record_metric(key, value, reduce)`` adds a value to this process's :class:`MetricCollector`.
Each reducer keeps *mergeable* state (sums and counts, Chan's parallel moments for STD, the raw
values for histograms), so partial states collected in several actor processes combine into
exactly the value one process would have computed. ``MetricLogger.flush(step)`` drains the
local collector, merges states handed to it from other processes (the runtime does this), turns
them into scalars named ``area/name/stat`` and writes them to the configured backends.
"""

from __future__ import annotations

import json
import math
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

from pydantic import Field

from forge_kernels.config import StrictModel

__all__ = [
    "ConsoleBackend",
    "JsonlBackend",
    "MetricCollector",
    "MetricLogger",
    "MetricsConfig",
    "Reduce",
    "ReducerState",
    "TensorBoardBackend",
    "get_collector",
    "record_metric",
]


class Reduce(str, Enum):
    """How the values recorded for one key within a step become the logged value."""

    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    STD = "std"
    HISTOGRAM = "hist"


@dataclass
class ReducerState:
    """Mergeable partial state of one key's reducer (picklable; travels between processes)."""

    reduce: Reduce
    count: int = 0
    total: float = 0.0  # SUM and MEAN
    mean: float = 0.0  # STD: running mean
    m2: float = 0.0  # STD: sum of squared deviations
    extreme: float | None = None  # MIN / MAX
    values: list[float] = field(default_factory=list)  # HISTOGRAM

    def add(self, value: float) -> None:
        value = float(value)
        self.count += 1
        r = self.reduce
        if r in (Reduce.MEAN, Reduce.SUM):
            self.total += value
        elif r is Reduce.STD:
            delta = value - self.mean
            self.mean += delta / self.count
            self.m2 += delta * (value - self.mean)
        elif r is Reduce.MIN:
            self.extreme = value if self.extreme is None else min(self.extreme, value)
        elif r is Reduce.MAX:
            self.extreme = value if self.extreme is None else max(self.extreme, value)
        else:
            self.values.append(value)

    def merge(self, other: ReducerState) -> None:
        """Fold ``other`` into this state, as if its values had been added here."""
        if other.reduce is not self.reduce:
            raise ValueError(
                f"cannot merge a {other.reduce.value!r} reducer into a {self.reduce.value!r} one"
            )
        if other.count == 0:
            return
        n_a, n_b = self.count, other.count
        self.count = n_a + n_b
        r = self.reduce
        if r in (Reduce.MEAN, Reduce.SUM):
            self.total += other.total
        elif r is Reduce.STD:  # Chan et al. parallel variance
            delta = other.mean - self.mean
            self.mean += delta * n_b / self.count
            self.m2 += other.m2 + delta * delta * n_a * n_b / self.count
        elif r is Reduce.MIN:
            assert other.extreme is not None
            self.extreme = other.extreme if self.extreme is None else min(self.extreme, other.extreme)
        elif r is Reduce.MAX:
            assert other.extreme is not None
            self.extreme = other.extreme if self.extreme is None else max(self.extreme, other.extreme)
        else:
            self.values.extend(other.values)

    def result(self) -> float | list[float]:
        """The reduced value (population std; a list of values for histograms)."""
        r = self.reduce
        if r is Reduce.HISTOGRAM:
            return list(self.values)
        if self.count == 0:
            return math.nan
        if r is Reduce.MEAN:
            return self.total / self.count
        if r is Reduce.SUM:
            return self.total
        if r is Reduce.STD:
            return math.sqrt(self.m2 / self.count)
        assert self.extreme is not None
        return self.extreme


class MetricCollector:
    """Per-process accumulator of reducer states keyed by metric name."""

    def __init__(self) -> None:
        self._states: dict[str, ReducerState] = {}

    def record(self, key: str, value: float, reduce: Reduce = Reduce.MEAN) -> None:
        reduce = Reduce(reduce)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = ReducerState(reduce)
        elif state.reduce is not reduce:
            raise ValueError(
                f"metric {key!r} was recorded with reduce={state.reduce.value!r} "
                f"and now with reduce={reduce.value!r}; use one reducer per key"
            )
        state.add(value)

    def merge(self, states: dict[str, ReducerState]) -> None:
        """Fold states drained from another collector (e.g. another process) into this one."""
        for key, other in states.items():
            mine = self._states.get(key)
            if mine is None:
                self._states[key] = ReducerState(other.reduce)
                mine = self._states[key]
            mine.merge(other)

    def drain(self) -> dict[str, ReducerState]:
        """Return the accumulated states and start afresh (called once per step)."""
        states, self._states = self._states, {}
        return states

    def __len__(self) -> int:
        return len(self._states)


_COLLECTOR = MetricCollector()


def get_collector() -> MetricCollector:
    """This process's collector (one per process, shared by every actor living in it)."""
    return _COLLECTOR


def record_metric(key: str, value: float, reduce: Reduce = Reduce.MEAN) -> None:
    """Record ``value`` under ``key`` (``area/name``) in this process; reduced at the next flush."""
    _COLLECTOR.record(key, value, reduce)


def reduce_states(states: dict[str, ReducerState]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Turn reducer states into ``area/name/stat`` scalars and histogram value lists."""
    scalars: dict[str, float] = {}
    histograms: dict[str, list[float]] = {}
    for key, state in sorted(states.items()):
        value = state.result()
        if state.reduce is Reduce.HISTOGRAM:
            histograms[f"{key}/hist"] = value  # type: ignore[assignment]
        else:
            scalars[f"{key}/{state.reduce.value}"] = value  # type: ignore[assignment]
    return scalars, histograms


# --------------------------------------------------------------------------------------- backends


class Backend(ABC):
    """Where flushed metrics go."""

    @abstractmethod
    def write(self, step: int, scalars: dict[str, float], histograms: dict[str, list[float]]) -> None:
        """Write one step's reduced metrics."""

    def close(self) -> None:
        """Release files or writers (default: nothing to release)."""
        return None


class ConsoleBackend(Backend):
    """One compact line per step: ``step 3 | reward/mean 0.42 | loss/mean -0.013 ...``.

    ``keys`` limits (and orders) what is shown; ``total_steps`` adds a ``[3/50]`` progress prefix
    and an ETA.
    """

    def __init__(self, keys: list[str] | None = None, total_steps: int | None = None,
                 stream: TextIO | None = None) -> None:
        self.keys = keys
        self.total_steps = total_steps
        self.stream = stream
        self._start = time.monotonic()

    def write(self, step: int, scalars: dict[str, float], histograms: dict[str, list[float]]) -> None:
        shown = [k for k in self.keys if k in scalars] if self.keys else sorted(scalars)
        parts = [f"{k} {_fmt(scalars[k])}" for k in shown]
        if self.total_steps:
            elapsed = time.monotonic() - self._start
            done = step + 1
            eta = elapsed / done * max(self.total_steps - done, 0)
            head = f"[{done}/{self.total_steps} eta {eta:.0f}s]"
        else:
            head = f"step {step}"
        print(" | ".join([head, *parts]), file=self.stream or sys.stdout, flush=True)


def _fmt(value: float) -> str:
    if isinstance(value, float) and (value == 0 or 1e-3 <= abs(value) < 1e5):
        return f"{value:.4g}"
    return f"{value:.3e}" if isinstance(value, float) else str(value)


class JsonlBackend(Backend):
    """One JSON object per step: ``{"step": 3, "time": ..., "reward/mean": 0.42, ...}``."""

    def __init__(self, path: str | Path, append: bool = False) -> None:
        """A fresh file per run; ``append`` keeps earlier rows (a resumed run continuing its log)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a" if append else "w", encoding="utf-8")

    def write(self, step: int, scalars: dict[str, float], histograms: dict[str, list[float]]) -> None:
        row: dict[str, Any] = {"step": step, "time": time.time()}
        row.update({k: (None if math.isnan(v) else v) for k, v in scalars.items()})
        row.update(histograms)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardBackend(Backend):
    """Scalars and histograms through ``torch.utils.tensorboard`` (open with ``tensorboard --logdir``)."""

    def __init__(self, logdir: str | Path, purge_step: int | None = None) -> None:
        """``purge_step``: a resumed run drops the events logged from that step on (a crashed
        attempt's), so the steps it re-runs replace them."""
        from torch.utils.tensorboard import SummaryWriter  # heavy import: only when configured

        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir), purge_step=purge_step)

    def write(self, step: int, scalars: dict[str, float], histograms: dict[str, list[float]]) -> None:
        import numpy as np

        for key, value in scalars.items():
            self._writer.add_scalar(key, value, global_step=step)
        for key, values in histograms.items():
            if values:
                self._writer.add_histogram(key, np.asarray(values, dtype=np.float64), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


# ----------------------------------------------------------------------------------------- config


class ConsoleBackendConfig(StrictModel):
    type: Literal["console"] = "console"
    keys: list[str] | None = None


class JsonlBackendConfig(StrictModel):
    type: Literal["jsonl"] = "jsonl"
    path: str = "runs/metrics.jsonl"
    append: bool = Field(default=False, description="keep rows already in the file (default: start it afresh)")


class TensorBoardBackendConfig(StrictModel):
    type: Literal["tensorboard"] = "tensorboard"
    logdir: str = "runs/tb"


BackendConfig = Annotated[
    ConsoleBackendConfig | JsonlBackendConfig | TensorBoardBackendConfig,
    Field(discriminator="type"),
]


class MetricsConfig(StrictModel):
    """The ``metrics:`` YAML section: a list of backends, each ``{type: console|jsonl|tensorboard, ...}``."""

    backends: list[BackendConfig] = Field(default_factory=lambda: [ConsoleBackendConfig()])


def _keep_rows_before(path: Path, step: int) -> None:
    """Drop the rows of ``step`` and later from a JSONL log (a resumed run re-runs those steps)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", -1) < step:
                kept.append(line)
        except json.JSONDecodeError:
            continue  # a row cut short by the crash
    path.write_text("".join(f"{line}\n" for line in kept))


def build_backend(cfg: Any, total_steps: int | None = None, resume_step: int | None = None) -> Backend:
    """The backend ``cfg`` describes; with ``resume_step`` a run resumed at that step continues the
    logs of the run it resumes (earlier rows kept, rows from ``resume_step`` on replaced)."""
    if isinstance(cfg, ConsoleBackendConfig):
        return ConsoleBackend(keys=cfg.keys, total_steps=total_steps)
    if isinstance(cfg, JsonlBackendConfig):
        if resume_step is not None:
            _keep_rows_before(Path(cfg.path), resume_step)
        return JsonlBackend(cfg.path, cfg.append or resume_step is not None)
    if isinstance(cfg, TensorBoardBackendConfig):
        return TensorBoardBackend(cfg.logdir, purge_step=resume_step)
    raise TypeError(f"unknown metrics backend config {cfg!r}")


class MetricLogger:
    """Controller-side logger: ``flush(step, remote_states)`` reduces and writes to every backend."""

    def __init__(self, backends: list[Backend], collector: MetricCollector | None = None) -> None:
        self.backends = backends
        self.collector = collector or get_collector()

    @classmethod
    def from_config(cls, cfg: MetricsConfig, total_steps: int | None = None,
                    resume_step: int | None = None) -> MetricLogger:
        return cls([build_backend(b, total_steps, resume_step) for b in cfg.backends])

    def flush(self, step: int, remote_states: list[dict[str, ReducerState]] = ()) -> dict[str, float]:
        """Reduce this process's metrics plus ``remote_states``, write them, return the scalars."""
        merged = MetricCollector()
        merged.merge(self.collector.drain())
        for states in remote_states:
            merged.merge(states)
        scalars, histograms = reduce_states(merged.drain())
        for backend in self.backends:
            backend.write(step, scalars, histograms)
        return scalars

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
