"""Every time limit around one evaluation, derived in one place from ``EvalOptions.timeout_s``.

* the candidate child: ``timeout_s`` (its wall clock, jail set-up included);
* the reference child: at least ``REFERENCE_FLOOR_S`` (it also times eager and ``torch.compile``
  on a GPU, and runs once per task);
* the eval service around one item: the candidate's limit plus ``SERVICE_SLACK_S`` for a reference
  run and a zygote (re)start, unless the server sets ``eval_deadline_s``;
* an HTTP client's read timeout for a whole request (a batch is many items): ``CLIENT_TIMEOUT_S``.
"""

from __future__ import annotations

from dataclasses import dataclass

from forge_kernels.eval.results import EvalOptions

__all__ = ["EvalDeadlines", "eval_deadlines", "REFERENCE_FLOOR_S", "SERVICE_SLACK_S", "CLIENT_TIMEOUT_S"]

REFERENCE_FLOOR_S = 120.0
SERVICE_SLACK_S = 240.0
CLIENT_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class EvalDeadlines:
    """Seconds allowed to each party of one evaluation."""

    candidate_s: float
    reference_s: float
    service_s: float


def eval_deadlines(options: EvalOptions, service_limit_s: float | None = None) -> EvalDeadlines:
    """The limits for ``options``; ``service_limit_s`` is a server's explicit ``eval_deadline_s``."""
    return EvalDeadlines(
        candidate_s=options.timeout_s,
        reference_s=max(options.timeout_s, REFERENCE_FLOOR_S),
        service_s=service_limit_s or options.timeout_s + SERVICE_SLACK_S,
    )
