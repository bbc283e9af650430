"""Counters, gauges and histograms rendered in the Prometheus text exposition format (0.0.4).

Small and dependency-free (``prometheus_client`` is not in the environment): single-threaded use
from the server's event loop, labels as keyword arguments.
"""

from __future__ import annotations

import abc

import math
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["Counter", "Gauge", "Histogram", "Registry", "LATENCY_BUCKETS"]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

LabelKey = tuple[tuple[str, str], ...]
M = TypeVar("M", bound="_Metric")


def _labels(key: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = list(key) + list(extra)
    if not pairs:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), " ")}"'
               for k, v in pairs)
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric(abc.ABC):
    """One metric family: a ``# HELP``/``# TYPE`` header plus its samples."""

    kind = ""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    @abc.abstractmethod
    def render(self) -> list[str]:
        """The family's lines in the Prometheus text format."""


class Counter(_Metric):
    """A monotonically increasing count per label set."""

    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self.values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        return self.header() + [f"{self.name}{_labels(k)} {_number(v)}" for k, v in sorted(self.values.items())]


class Gauge(_Metric):
    """A value read at scrape time from ``sample()``: ``[(labels, value), ...]``."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, sample: Callable[[], list[tuple[dict[str, str], float]]],
                 kind: str = "gauge") -> None:
        """``kind='counter'`` exposes a count kept elsewhere (a worker's own counter) as a counter."""
        super().__init__(name, help_text)
        self.sample = sample
        self.kind = kind

    def render(self) -> list[str]:
        return self.header() + [f"{self.name}{_labels(tuple(sorted(l.items())))} {_number(v)}"
                                for l, v in self.sample()]


class Histogram(_Metric):
    """Cumulative buckets, sum and count per label set."""

    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        super().__init__(name, help_text)
        self.buckets = tuple(sorted(buckets)) + (math.inf,)
        self.series: dict[LabelKey, tuple[list[int], list[float]]] = {}  # counts per bucket, [sum]

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        counts, total = self.series.setdefault(key, ([0] * len(self.buckets), [0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        total[0] += value

    def render(self) -> list[str]:
        lines = self.header()
        for key, (counts, total) in sorted(self.series.items()):
            for bound, count in zip(self.buckets, counts):
                lines.append(f"{self.name}_bucket{_labels(key, [('le', _number(bound))])} {count}")
            lines.append(f"{self.name}_sum{_labels(key)} {_number(total[0])}")
            lines.append(f"{self.name}_count{_labels(key)} {counts[-1]}")
        return lines


class Registry:
    """The metrics of one server, rendered together."""

    def __init__(self) -> None:
        self.metrics: list[_Metric] = []

    def add(self, metric: M) -> M:
        self.metrics.append(metric)
        return metric

    def render(self) -> str:
        return "\n".join(line for m in self.metrics for line in m.render()) + "\n"
