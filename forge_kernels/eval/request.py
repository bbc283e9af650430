"""What the evaluator asks of one child: a typed request, sent to the zygote as a JSON object.

One class for both roles (``reference``, ``candidate``); the candidate-only fields have empty
defaults. Built by :meth:`forge_kernels.eval.evaluator.Evaluator.child_request`, read by the
harness in the child (:mod:`forge_kernels.eval.harness`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ChildRequest"]


@dataclass
class ChildRequest:
    """One evaluation child's instructions."""

    role: Literal["reference", "candidate"]
    device: Literal["cpu", "cuda"]
    device_index: int
    task_source: str  # compiled in memory with the shape overrides written into it
    overrides: dict[str, Any]
    alt_overrides: dict[str, Any] | None  # None: the task has no alternate shapes here
    seed: int
    trials: int
    alt_trials: int
    host_memory_mb: int
    address_space_limit: bool
    isolation: Literal["os", "audit"]
    max_processes: int
    tmp_size_mb: int
    timing: bool
    warmup: int
    repeats: int
    compile_baseline: bool
    profile: bool
    timing_lock: str | None = None  # path of the device's timing lock file
    tmp_dir: str | None = None  # a host temp dir, only without the jail
    signed_trial: bool = True  # also run the evaluator's sign-flipped input draw
    # the candidate role
    candidate_source: str = ""
    kernels: dict[str, list[int]] = field(default_factory=dict)  # kernel name -> [first, last] line
    expected: dict[str, list[list[Any]]] = field(default_factory=dict)  # shapes -> [[dtype, shape], ...]
    language: Literal["triton", "cuda"] = "triton"
    cuda_libraries: dict[str, str] = field(default_factory=dict)  # extension spec key -> prebuilt .so
    cuda_kernels: list[str] = field(default_factory=list)  # the candidate's __global__ names
    # set on the way: by the zygote (its cgroup) and by the child itself (where the source went)
    cgroup_note: str = ""
    candidate_path: str = ""

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able form sent to the zygote."""
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "ChildRequest":
        """Rebuild a request; unknown or missing fields are an evaluator bug and raise."""
        return cls(**data)

    def cache_key_fields(self) -> dict[str, Any]:
        """What decides a reference's outputs (not where it runs or which lock it holds)."""
        return {k: v for k, v in self.to_wire().items() if k not in ("tmp_dir", "timing_lock", "cgroup_note")}
