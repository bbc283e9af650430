"""Reward functions over an :class:`~forge_kernels.eval.EvalResult`, selectable by name in YAML.

    reward:
      name: kernelgym        # or tritonforge, kevin, or a name registered with @register_reward
      speedup_cap: 10.0

``C`` is correctness (0/1), ``S`` the speedup over the eager reference (0 when timing is
unavailable, e.g. on CPU, so rewards reduce to their correctness terms there), ``PR`` the
profiling ratio (0 when unavailable). Rejected hacks already make ``C = 0``; flags that were only
warned about (``torch_ops: penalize``, precision downcast, excessive speedup) cost ``flag_penalty``
each. An ``internal_error`` result is an evaluator failure, not the candidate's: :func:`compute_reward`
returns None for it so the caller can drop the sample instead of punishing it.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.eval.faults import FaultClass
from forge_kernels.eval.results import EvalResult
from forge_kernels.registry import Registry

__all__ = ["REWARDS", "RewardConfig", "RewardFn", "compute_reward", "register_reward", "reward_names"]


class RewardConfig(StrictModel):
    """The YAML ``reward`` section."""

    name: str = Field(default="kernelgym", description="a registered reward function, or 'package.module:function'")
    speedup_cap: float = Field(default=10.0, gt=0, description="KernelGym: S is capped at this")
    compile_reward: float = Field(default=0.1, description="TritonForge: compiled but incorrect")
    correct_reward: float = Field(default=0.3, description="TritonForge: correct, no speedup tier reached")
    speedup_tiers: list[tuple[float, float]] = Field(
        default_factory=lambda: [(1.0, 0.5), (1.5, 0.7), (2.0, 1.0)],
        description="TritonForge: (minimum speedup, reward) pairs; the highest tier reached counts",
    )
    flag_penalty: float = Field(default=0.0, ge=0, description="subtracted per non-rejected hack flag")

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        REWARDS.get(name, "reward.name")
        return name


RewardFn = Callable[[EvalResult, RewardConfig], float]
REWARDS: Registry[RewardFn] = Registry("reward", check=lambda fn: None if callable(fn) else f"{fn!r} is not callable")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: make ``fn(result, config) -> float`` selectable as ``reward.name: <name>``."""
    return REWARDS.register(name)


def reward_names() -> list[str]:
    """Names usable in ``reward.name``."""
    return REWARDS.names()


def _c(result: EvalResult) -> float:
    return 1.0 if result.correct else 0.0


def _s(result: EvalResult) -> float:
    return result.speedup if (result.correct and result.timing_available and result.speedup) else 0.0


@register_reward("kernelgym")
def kernelgym_reward(result: EvalResult, config: RewardConfig) -> float:
    """KernelGym / Dr. Kernel: ``C + C*min(S, cap) + C*PR``."""
    c = _c(result)
    return c + c * min(_s(result), config.speedup_cap) + c * (result.profiling_ratio or 0.0)


@register_reward("tritonforge")
def tritonforge_reward(result: EvalResult, config: RewardConfig) -> float:
    """TritonForge-style tiers: 0 (not compiled), compile reward, correct reward, speedup tiers."""
    if not result.compiled:
        return 0.0
    if not result.correct:
        return config.compile_reward
    reward = config.correct_reward
    for threshold, tier_reward in sorted(config.speedup_tiers):
        if _s(result) >= threshold:
            reward = max(reward, tier_reward)
    return reward


@register_reward("kevin")
def kevin_reward(result: EvalResult, config: RewardConfig) -> float:
    """Kevin-32B: ``0.3*C + S*C``."""
    c = _c(result)
    return 0.3 * c + _s(result) * c


def compute_reward(result: EvalResult, config: RewardConfig | None = None) -> float | None:
    """The configured reward for ``result``; None for ``internal_error`` (no signal, drop the sample)."""
    config = config or RewardConfig()
    if result.fault is FaultClass.INTERNAL_ERROR:
        return None
    penalty = config.flag_penalty * sum(1 for h in result.hacks if not h.rejected)
    return REWARDS.get(config.name)(result, config) - penalty
