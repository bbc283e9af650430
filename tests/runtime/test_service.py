"""Services on both backends: routers, sticky sessions, fanout, fail-over and restarts."""

from __future__ import annotations

import asyncio
from collections import Counter as Tally

import pytest

from forge_kernels.runtime import ActorDiedError, NoHealthyReplicaError, Service, spawn


async def uids_of(svc: Service) -> list[str]:
    return [w["uid"] for w in await svc.whoami.fanout()]


def test_round_robin_and_fanout(run, backend, actors):
    async def body():
        svc = await spawn(actors.Counter, {"start": 1}, backend=backend, replicas=3)
        try:
            assert isinstance(svc, Service)
            uids = await uids_of(svc)
            assert len(set(uids)) == 3
            routed = [(await svc.whoami.route())["uid"] for _ in range(6)]
            assert routed == uids + uids
            assert await svc.add.fanout(2) == [3, 3, 3]
        finally:
            await svc.stop()

    run(body())


def test_least_loaded_avoids_the_busy_replica(run, backend, actors):
    async def body():
        svc = await spawn(actors.Counter, backend=backend, replicas=2, router="least_loaded")
        try:
            uids = await uids_of(svc)
            busy = asyncio.ensure_future(svc.work.route(-1, 0.5))  # goes to replica 0
            await asyncio.sleep(0.05)
            answers = [await svc.work.route(i, 0.0) for i in range(4)]
            assert [uid for _, uid in answers] == [uids[1]] * 4
            assert await busy == (-1, uids[0])
        finally:
            await svc.stop()

    run(body())


def test_sticky_sessions(run, backend, actors):
    async def body():
        svc = await spawn(actors.Counter, backend=backend, replicas=2)
        try:
            async def in_session() -> list[str]:
                async with svc.session():
                    return [(await svc.whoami.route())["uid"] for _ in range(5)]

            first, second = await asyncio.gather(in_session(), in_session())
            assert len(set(first)) == 1 and len(set(second)) == 1
            assert first[0] != second[0]  # the router spread the two sessions
            outside = {(await svc.whoami.route())["uid"] for _ in range(4)}
            assert len(outside) == 2  # no session: round robin again
        finally:
            await svc.stop()

    run(body())


def test_killed_replica_fails_over_and_restarts(run, backend, actors, hard_crash):
    """Kill a replica with requests in flight and queued: every request answered exactly once."""

    async def body():
        svc = await spawn(actors.Counter, backend=backend, replicas=2, max_restarts=1,
                          health_interval_s=0.05)
        try:
            before = await uids_of(svc)
            victim = svc.replicas[0]
            # round robin: even requests queue on the victim, which dies while running request 10
            die_on = (10, before[0], hard_crash)
            answers = await asyncio.gather(*(svc.work.route(i, 0.01, die_on) for i in range(40)))
            assert victim.last_failure and victim.restarts + (not victim.healthy) == 1
            ids = Tally(request_id for request_id, _ in answers)
            assert sorted(ids) == list(range(40)) and set(ids.values()) == {1}
            served_by = Tally(uid for _, uid in answers)
            assert before[1] in served_by  # the survivor took over
            assert Tally(uid for _, uid in answers[:10])[before[0]] == 5  # served before dying
            # the in-flight request and every request queued behind it were answered elsewhere
            assert {uid for _, uid in answers[10::2]} == {before[1]}
            while not victim.healthy:  # restarted in the background
                await asyncio.sleep(0.05)
            assert victim.restarts == 1
            after = await uids_of(svc)
            assert after[1] == before[1] and after[0] not in before  # a fresh actor
            routed = {(await svc.whoami.route())["uid"] for _ in range(4)}
            assert routed == set(after)
        finally:
            await svc.stop()

    run(body())


def test_no_healthy_replica_fails_clearly(run, backend, actors, hard_crash):
    async def body():
        svc = await spawn(actors.Counter, backend=backend, service=True, max_restarts=0)
        try:
            assert len(svc.replicas) == 1
            with pytest.raises(ActorDiedError):
                await svc.replicas[0].mesh.crash.call_one(hard_crash)
            with pytest.raises(NoHealthyReplicaError, match="no healthy replica.*max_restarts=0"):
                await svc.get.route()
            with pytest.raises(NoHealthyReplicaError):
                await svc.get.fanout()
        finally:
            await svc.stop()

    run(body())


def test_health_check_restarts_an_idle_dead_replica(run, backend, actors, hard_crash):
    """No request needs to hit a dead replica: the periodic health check finds and restarts it."""

    async def body():
        svc = await spawn(actors.Counter, backend=backend, replicas=2, health_interval_s=0.05)
        try:
            victim = svc.replicas[1]
            first_mesh = victim.mesh
            with pytest.raises(ActorDiedError):
                await first_mesh.crash.call_one(hard_crash)  # behind the service's back
            while victim.restarts == 0:
                await asyncio.sleep(0.05)
            assert victim.healthy and victim.mesh is not first_mesh
            assert "crash" in victim.last_failure or "exited" in victim.last_failure
            assert len(set(await uids_of(svc))) == 2
        finally:
            await svc.stop()

    run(body())


def test_requests_wait_for_a_restarting_replica(run, backend, actors, hard_crash):
    async def body():
        svc = await spawn(actors.Counter, {"start": 7}, backend=backend, service=True,
                          max_restarts=1)
        try:
            old = (await svc.whoami.route())["uid"]
            with pytest.raises(ActorDiedError):
                await svc.replicas[0].mesh.crash.call_one(hard_crash)
            answers = await asyncio.gather(*(svc.add.route(1) for _ in range(3)))
            assert sorted(answers) == [8, 9, 10]  # served once each, by the restarted actor
            assert svc.replicas[0].restarts == 1
            assert (await svc.whoami.route())["uid"] != old
        finally:
            await svc.stop()

    run(body())
