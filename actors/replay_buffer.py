"""The replay buffer: groups of episodes (samples of one prompt) waiting to be trained on.

``add(group)`` runs the five group hooks, each an overridable method (TritonForge's buffer):

1. :meth:`ReplayBuffer.filter_item` drops single episodes (default: the evaluator failed, so the
   reward carries no signal); with ``prs`` set, profiling rejection sampling (Dr. Kernel,
   :class:`~losses.guards.PRSGuard`) then thins out correct episodes whose kernels do little of
   the device work;
2. :meth:`ReplayBuffer.group_statistics` summarises the rewards of what is left;
3. :meth:`ReplayBuffer.is_valid_group` rejects whole groups (default: too small; optionally
   groups whose rewards are all equal, which carry no GRPO signal — DAPO's dynamic sampling);
4. :meth:`ReplayBuffer.normalize_group` rescales rewards (default: none); the raw reward is
   always kept in ``turn.raw_reward``;
5. :meth:`ReplayBuffer.pad_group` fills a group up to a fixed size (default: off) with copies
   marked ``turn.padding``, which advantage estimation leaves out (advantage 0).

``sample(n_groups, policy_version)`` first evicts groups older than ``max_policy_age`` versions,
then hands out ``n_groups`` groups (oldest first or at random), removing them unless ``reuse``.
"""

from __future__ import annotations

import copy
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.types import Episode
from losses.guards import PRSGuard

__all__ = ["GroupStats", "ReplayBuffer"]

Group = list[Episode]


@dataclass
class GroupStats:
    """Reward statistics of one group (over its single-turn or summed multi-turn rewards)."""

    count: int
    mean: float
    std: float
    success_rate: float  # of the episodes' last turns (the environment's notion of solved)


def episode_reward(ep: Episode) -> float:
    return sum(ep.rewards)


class ReplayBuffer(Actor):
    """Bounded store of groups with staleness eviction; subclass to change the group hooks."""

    class Config(StrictModel):
        max_groups: int = Field(default=64, ge=1, description="capacity; the oldest group goes when full")
        max_policy_age: int = Field(default=1, ge=0, description="evict groups this many versions behind")
        reuse: bool = Field(default=False, description="keep sampled groups (until evicted by age)")
        order: Literal["fifo", "random"] = "fifo"
        seed: int = 0
        min_group_size: int = Field(default=1, ge=1, description="smaller groups (after filtering) are rejected")
        drop_uniform_groups: bool = Field(default=False, description="reject groups whose rewards are all equal")
        normalization: Literal["none", "center", "zscore"] = "none"
        pad_to: int | None = Field(default=None, ge=1, description="pad groups to this size with masked copies")
        prs: PRSGuard | None = Field(
            default=None, description="profiling rejection sampling {tau, scale, seed}: keep a correct episode with "
                                      "probability clip((PR - tau) / scale, 0, 1), PR the share of device time in the "
                                      "candidate's own kernels (needs profiled evaluations: GPUs)")

    async def setup(self) -> None:
        self.groups: list[Group] = []
        self.rng = random.Random(self.config.seed)

    # ------------------------------------------------------------------ the five hooks
    def filter_item(self, episode: Episode) -> bool:
        """Keep ``episode``? Default: drop episodes whose evaluation failed (no reward signal)."""
        return all(t.reward_valid for t in episode.turns)

    def group_statistics(self, group: Group) -> GroupStats:
        rewards = [episode_reward(ep) for ep in group]
        solved = [ep.turns[-1].success for ep in group]
        return GroupStats(
            count=len(group),
            mean=statistics.fmean(rewards) if rewards else 0.0,
            std=statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            success_rate=sum(solved) / len(solved) if solved else 0.0,
        )

    def is_valid_group(self, group: Group, stats: GroupStats) -> bool:
        if stats.count < self.config.min_group_size:
            return False
        return not (self.config.drop_uniform_groups and stats.std == 0.0)

    def normalize_group(self, group: Group, stats: GroupStats) -> Group:
        """Rescale rewards in place of the raw ones (kept in ``turn.raw_reward``)."""
        mode = self.config.normalization
        for ep in group:
            for turn in ep.turns:
                raw = turn.unnormalized_reward
                turn.raw_reward = raw
                if mode == "center":
                    turn.reward = raw - stats.mean
                elif mode == "zscore":
                    turn.reward = (raw - stats.mean) / (stats.std + 1e-6)
        return group

    def pad_group(self, group: Group, stats: GroupStats) -> Group:
        target = self.config.pad_to
        if target is None or len(group) >= target:
            return group
        padded = list(group)
        for i in range(target - len(group)):
            clone = copy.deepcopy(group[i % len(group)])
            clone.episode_id = f"{clone.episode_id}-pad{i}"
            for turn in clone.turns:
                turn.padding = True
            padded.append(clone)
        return padded

    # ------------------------------------------------------------------ endpoints
    @endpoint
    async def add(self, group: Group) -> bool:
        """Run the hooks on ``group`` and store it; returns whether it was kept."""
        if not group:
            raise ValueError("cannot add an empty group")
        kept = [ep for ep in group if self.filter_item(ep)]
        record_metric("buffer/filtered_items", len(group) - len(kept), Reduce.SUM)
        if self.config.prs is not None and kept:
            flags, _ = self.config.prs.keep_turns([ep.turns[-1] for ep in kept])
            record_metric("buffer/prs_rejected", flags.count(False), Reduce.SUM)
            kept = [ep for ep, keep in zip(kept, flags, strict=True) if keep]
        stats = self.group_statistics(kept)
        if not self.is_valid_group(kept, stats):
            record_metric("buffer/rejected_groups", 1, Reduce.SUM)
            return False
        self.groups.append(self.pad_group(self.normalize_group(kept, stats), stats))
        if len(self.groups) > self.config.max_groups:
            self.groups.pop(0)
            record_metric("buffer/overflow_evicted", 1, Reduce.SUM)
        return True

    @endpoint
    async def sample(self, n_groups: int, policy_version: int) -> list[Group] | None:
        """``n_groups`` groups trainable at ``policy_version``, or None if fewer are ready."""
        if n_groups < 1:
            raise ValueError(f"n_groups must be >= 1, got {n_groups}")
        self._evict(policy_version)
        if len(self.groups) < n_groups:
            return None
        if self.config.order == "fifo":
            idx = list(range(n_groups))
        else:
            idx = sorted(self.rng.sample(range(len(self.groups)), n_groups))
        picked = [self.groups[i] for i in idx]
        if not self.config.reuse:
            for i in reversed(idx):
                self.groups.pop(i)
        return picked

    def _evict(self, policy_version: int) -> None:
        oldest = policy_version - self.config.max_policy_age
        fresh = [g for g in self.groups if min(ep.policy_version for ep in g) >= oldest]
        if len(fresh) < len(self.groups):
            record_metric("buffer/stale_evicted", len(self.groups) - len(fresh), Reduce.SUM)
        self.groups = fresh

    @endpoint
    async def num_groups(self) -> int:
        return len(self.groups)

    @endpoint
    async def save_state(self, path: str) -> None:
        """Write the buffered groups (episodes with their policy versions) and the sampling RNG
        into checkpoint directory ``path`` (``buffer.pt``)."""
        prs = None if self.config.prs is None else self.config.prs.rng_state()
        torch.save({"groups": self.groups, "rng": self.rng.getstate(), "prs_rng": prs}, Path(path) / "buffer.pt")

    @endpoint
    async def load_state(self, path: str) -> int:
        """Restore what :meth:`save_state` wrote; returns the number of groups restored."""
        state = torch.load(Path(path) / "buffer.pt", weights_only=False)  # our own checkpoint
        self.groups, _ = state["groups"], self.rng.setstate(state["rng"])
        if self.config.prs is not None and state.get("prs_rng") is not None:
            self.config.prs.set_rng_state(state["prs_rng"])
        return len(self.groups)
