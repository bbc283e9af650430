"""The eval server's Prometheus metrics: request outcomes, results by fault class, latency and
evaluation-time histograms, queue depth, and per-worker state, counts and restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forge_kernels.eval.results import EvalResult
from forge_kernels.eval.service.prometheus import Counter, Gauge, Histogram, Registry

if TYPE_CHECKING:
    from forge_kernels.eval.service.scheduler import Scheduler

__all__ = ["ServiceMetrics"]

_STATES = ("starting", "ready", "restarting", "failed", "stopped")


class ServiceMetrics:
    """Metric objects of one server; gauges read the scheduler at scrape time."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.requests = self.registry.add(Counter(
            "forge_eval_requests_total",
            "Accepted evaluation requests by outcome (evaluated, cache_hit, deduplicated, retried_id, "
            "rejected_queue_full)"))
        self.http_errors = self.registry.add(Counter(
            "forge_eval_http_errors_total", "Rejected HTTP requests by status code"))
        self.retries = self.registry.add(Counter(
            "forge_eval_retries_total",
            "Evaluations sent back to the queue, by reason (internal_error, deadline, zygote_died, worker_failed, "
            "worker_restart)"))
        self.results = self.registry.add(Counter(
            "forge_eval_results_total", "Finished evaluations by fault class"))
        self.latency = self.registry.add(Histogram(
            "forge_eval_request_latency_seconds", "Arrival to answer, per request (cached: cache or in-flight hit)"))
        self.evaluation = self.registry.add(Histogram(
            "forge_eval_evaluation_seconds", "Time one evaluation spent on a worker"))
        self.queue_wait = self.registry.add(Histogram(
            "forge_eval_queue_wait_seconds", "Time an evaluation waited for a worker"))

    def bind(self, scheduler: Scheduler) -> None:
        """Register the gauges that read ``scheduler``."""
        workers = scheduler.workers
        self.registry.add(Gauge("forge_eval_queue_depth", "Evaluations waiting for a worker",
                                lambda: [({}, len(scheduler.queue))]))
        self.registry.add(Gauge("forge_eval_in_flight", "Evaluations running on workers",
                                lambda: [({"worker": w.id}, w.in_flight) for w in workers]))
        self.registry.add(Gauge("forge_eval_cache_entries", "Results held in the result cache",
                                lambda: [({}, len(scheduler.cache))]))
        self.registry.add(Gauge("forge_eval_worker_state", "1 for the state each worker is in",
                                lambda: [({"worker": w.id, "state": s}, float(w.state == s))
                                         for w in workers for s in _STATES]))
        self.registry.add(Gauge("forge_eval_worker_evaluations_total", "Evaluations finished per worker",
                                lambda: [({"worker": w.id}, w.evaluations) for w in workers], kind="counter"))
        self.registry.add(Gauge("forge_eval_worker_restarts_total", "Worker restarts",
                                lambda: [({"worker": w.id}, w.restarts) for w in workers], kind="counter"))
        self.registry.add(Gauge("forge_eval_zygote_restarts_total", "Zygotes the evaluators replaced by themselves",
                                lambda: [({"worker": w.id}, w.info().zygote_restarts) for w in workers],
                                kind="counter"))

    def evaluated(self, result: EvalResult, seconds: float, queued_s: float) -> None:
        self.results.inc(fault=result.fault.value)
        self.evaluation.observe(seconds)
        self.queue_wait.observe(queued_s)

    def render(self) -> str:
        return self.registry.render()
