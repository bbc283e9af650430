"""Replay buffer: the five group hooks, staleness eviction, sampling without reuse, capacity."""

from __future__ import annotations

import pytest

from actors.advantages import ComputeAdvantages
from actors.replay_buffer import GroupStats, ReplayBuffer
from forge_kernels.types import Completion, Episode, Turn


def group(gid: str, rewards: list[float | None], version: int = 0,
          profiling: list[float | None] | None = None) -> list[Episode]:
    eps = []
    for i, r in enumerate(rewards):
        c = Completion([1, 2], [3, 4], "", [-1.0, -1.0], version)
        info = {"correct": bool(r), "profiling_ratio": None if profiling is None else profiling[i]}
        eps.append(Episode(f"{gid}-{i}", gid, "t", [Turn(c, reward=r or 0.0, info=info, success=bool(r),
                                                         reward_valid=r is not None)]))
    return eps


async def make(**cfg) -> ReplayBuffer:
    buf = ReplayBuffer(ReplayBuffer.Config(**cfg))
    await buf.setup()
    return buf


def test_filter_validity_normalisation_and_padding(run):
    async def scenario():
        buf = await make(normalization="zscore", pad_to=4, min_group_size=2, drop_uniform_groups=True)
        assert await buf.add(group("a", [1.0, 0.0, None])) is True  # the failed eval is filtered out
        assert await buf.add(group("b", [1.0, None, None])) is False  # one left: below min_group_size
        assert await buf.add(group("c", [0.5, 0.5])) is False  # no reward spread: no signal
        (stored,) = await buf.sample(1, 0)
        return stored

    stored = run(scenario())
    assert len(stored) == 4 and [ep.turns[0].padding for ep in stored] == [False, False, True, True]
    raw = [ep.turns[0].raw_reward for ep in stored[:2]]
    assert raw == [1.0, 0.0]
    assert [ep.turns[0].reward for ep in stored[:2]] == pytest.approx([1.0, -1.0], abs=1e-5)  # z-scored

    async def advantages():
        adv = ComputeAdvantages(ComputeAdvantages.Config(estimator="grpo"))
        return await adv.compute(stored)

    with_adv = run(advantages())
    assert [ep.turns[0].advantage for ep in with_adv[2:]] == [0.0, 0.0]  # padding copies get no advantage
    assert with_adv[0].turns[0].advantage > 0 > with_adv[1].turns[0].advantage


def test_staleness_eviction_fifo_and_no_reuse(run):
    async def scenario():
        buf = await make(max_policy_age=1, max_groups=3)
        await buf.add(group("v0", [1.0, 0.0], version=0))
        await buf.add(group("v1", [1.0, 0.0], version=1))
        await buf.add(group("v2", [1.0, 0.0], version=2))
        assert await buf.sample(3, 2) is None  # v0 is two versions behind: evicted, two left
        first = await buf.sample(1, 2)
        second = await buf.sample(1, 2)
        assert await buf.sample(1, 2) is None  # sampled groups are gone (no reuse)
        for i in range(5):
            await buf.add(group(f"n{i}", [1.0], version=2))
        return first, second, await buf.num_groups()

    first, second, size = run(scenario())
    assert first[0][0].group_id == "v1" and second[0][0].group_id == "v2"  # oldest first
    assert size == 3  # capacity


def test_reuse_keeps_groups_until_they_age_out(run):
    async def scenario():
        buf = await make(reuse=True, max_policy_age=0, order="random")
        await buf.add(group("a", [1.0], version=0))
        again = [await buf.sample(1, 0) for _ in range(3)]
        return again, await buf.sample(1, 1)

    again, aged = run(scenario())
    assert all(g[0][0].group_id == "a" for g in again) and aged is None


class KeepCorrectOnly(ReplayBuffer):
    """A subclass overriding two hooks, as a user would."""

    def filter_item(self, episode: Episode) -> bool:
        return bool(episode.turns[0].info.get("correct"))

    def is_valid_group(self, group: list[Episode], stats: GroupStats) -> bool:
        return stats.success_rate == 1.0


def test_hooks_are_overridable(run):
    async def scenario():
        buf = KeepCorrectOnly(KeepCorrectOnly.Config())
        await buf.setup()
        kept = await buf.add(group("a", [1.0, 0.0, 1.0]))
        return kept, await buf.sample(1, 0)

    kept, sampled = run(scenario())
    assert kept and [ep.episode_id for ep in sampled[0]] == ["a-0", "a-2"]
    with pytest.raises(ValueError, match="n_groups must be >= 1"):
        run(KeepCorrectOnly(KeepCorrectOnly.Config()).sample(0, 0))


def test_prs_drops_correct_episodes_whose_kernels_do_little_of_the_work(run):
    async def scenario():
        buf = await make(prs={"tau": 0.3, "scale": 0.1})
        # correct with PR 0.9 (always kept), correct with PR 0.1 (never kept), incorrect (always kept)
        kept = await buf.add(group("a", [1.0, 1.0, 0.0], profiling=[0.9, 0.1, None]))
        (stored,) = await buf.sample(1, 0)
        return kept, stored

    kept, stored = run(scenario())
    assert kept and [ep.episode_id for ep in stored] == ["a-0", "a-2"]

    async def unprofiled():
        buf = await make(prs={})
        await buf.add(group("b", [1.0], profiling=[None]))

    with pytest.raises(ValueError, match="profiling ratio.*only on GPUs"):
        run(unprofiled())
